package swarm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// A flush's batch, given back, is where the batch after the next take
// starts: empty, in the same maps, and what the first flush took is not
// in it.
func TestPendingBatchesReuseTheLastFlushsMaps(t *testing.T) {
	var p pending
	p.reset()
	h := bittorrent.InfoHash{3}
	p.addAnnounce(h, 1, 0, 0, "u1", transfer{10, 20, 10, 20},
		&userUpdate{key: userTorrent{user: "u1", torrent: "t3"}, hash: h, version: 1})
	p.addCheat(&cheatCheck{key: "k", at: 5})
	first := p.take()
	require.Len(t, first.users, 1)
	require.Len(t, first.cheats, 1)
	require.Equal(t, int64(10), first.totals["u1"][0])
	users := first.users
	p.recycle(&first)

	p.addAnnounce(h, 0, 1, 0, "u2", transfer{1, 2, 1, 2},
		&userUpdate{key: userTorrent{user: "u2", torrent: "t3"}, hash: h, version: 1})
	second := p.take()
	require.Equal(t, map[userTorrent]userUpdate{{user: "u2", torrent: "t3"}: {key: userTorrent{user: "u2", torrent: "t3"},
		hash: h, version: 1}}, second.users, "only the second flush's user")
	require.Empty(t, second.cheats)
	require.NotContains(t, second.totals, "u1")
	p.addAnnounce(h, 0, 1, 0, "u3", transfer{1, 2, 1, 2},
		&userUpdate{key: userTorrent{user: "u3", torrent: "t3"}, hash: h, version: 1})
	require.Len(t, users, 1, "the first flush's map holds the batch after the second take")
	require.Contains(t, users, userTorrent{user: "u3", torrent: "t3"})
}
