package swarm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The buffer keeps the newest row per record: a newer seq replaces the
// one held (and becomes the newest change), an older one put back by a
// refused delivery does not; past the cap the oldest change goes, and the
// oldest announce dropped is kept until a scan that saw no later drop
// clears it. Counters: the newest reply's, with the last time a reply
// showed a seeder kept.
func TestFeedBufferKeepsTheNewestRowPerRecord(t *testing.T) {
	var b feedBuffer
	b.init()
	h1, h2 := bittorrent.InfoHash{1}, bittorrent.InfoHash{2}
	row := func(hash bittorrent.InfoHash, user string, seq, at int64) heldRow {
		return heldRow{key: rowKey{hash: hash, user: user}, row: FeedRow{UserID: user, Seq: seq}, announced: at}
	}
	require.Zero(t, b.hold(row(h1, "a", 1, 100), seenTorrent{id: "1", seeders: 1, lastAction: 100, at: 100}, 3))
	require.Zero(t, b.hold(row(h1, "b", 1, 110), seenTorrent{id: "1", seeders: 0, leechers: 2, at: 110}, 3))
	require.Zero(t, b.hold(row(h1, "a", 2, 120), seenTorrent{id: "1", seeders: 0, leechers: 3, at: 120}, 3))
	require.Zero(t, b.hold(row(h1, "a", 1, 100), seenTorrent{id: "1", seeders: 1, lastAction: 100, at: 100}, 3),
		"an older row put back is not held")
	require.Equal(t, 2, b.held())
	require.Zero(t, b.hold(row(h2, "a", 5, 130), seenTorrent{id: "2", at: 130}, 3))
	require.Equal(t, 1, b.hold(row(h2, "b", 1, 140), seenTorrent{id: "2", at: 140}, 3), "past the cap")
	from, gen := b.droppedSince()
	require.Equal(t, int64(110), from, "the oldest change went: b on h1 (a's was replaced later)")
	require.Zero(t, b.hold(row(h1, "c", 1, 150), seenTorrent{id: "1", at: 150}, 4))
	require.Equal(t, 1, b.hold(row(h1, "d", 1, 160), seenTorrent{id: "1", at: 160}, 4))
	b.recovered(gen)
	from, gen = b.droppedSince()
	require.Equal(t, int64(110), from, "a drop after the scan began keeps it")
	b.recovered(gen)
	from, _ = b.droppedSince()
	require.Zero(t, from)

	rows, torrents := b.take()
	require.Len(t, rows, 4)
	require.Equal(t, []int64{130, 140, 150, 160}, []int64{rows[0].announced, rows[1].announced, rows[2].announced, rows[3].announced},
		"oldest change first; a's seq 2 (120) was the oldest at the second drop")
	require.Equal(t, int64(5), rows[0].row.Seq)
	require.Equal(t, seenTorrent{id: "1", lastAction: 100, at: 160}, torrents[h1], "the newest reply's counters, the last seeder's time kept")
	require.Zero(t, b.held())
	require.Equal(t, int64(2), b.dropped)
}

// Records changed many times between rounds: the dead rows are compacted
// away (the slice stays within a few times the records), each record's
// newest row is taken once, in the order of the records' last change,
// and a round's slices given back are filled by the next take.
func TestFeedBufferCompactsReplacedRows(t *testing.T) {
	var b feedBuffer
	b.init()
	h := bittorrent.InfoHash{7}
	users := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for seq := int64(1); seq <= 100; seq++ {
		for i, u := range users {
			at := seq*100 + int64(i)
			require.Zero(t, b.hold(heldRow{key: rowKey{hash: h, user: u}, row: FeedRow{UserID: u, Seq: seq}, announced: at},
				seenTorrent{id: "7", at: at}, 1000))
		}
		require.LessOrEqual(t, len(b.rows), 2*len(users)+64, "dead rows are compacted")
	}
	// c's newest change after the others': it goes last.
	require.Zero(t, b.hold(heldRow{key: rowKey{hash: h, user: "c"}, row: FeedRow{UserID: "c", Seq: 101}, announced: 20000},
		seenTorrent{id: "7", at: 20000}, 1000))
	require.Equal(t, len(users), b.held())
	rows, torrents := b.take()
	require.Len(t, rows, len(users))
	var order []string
	for _, r := range rows {
		order = append(order, r.key.user)
		want := int64(100)
		if r.key.user == "c" {
			want = 101
		}
		require.Equal(t, want, r.row.Seq, r.key.user)
	}
	require.Equal(t, []string{"a", "b", "d", "e", "f", "g", "h", "i", "j", "c"}, order)
	require.Equal(t, int64(20000), torrents[h].at)
	b.recycle(rows, torrents)
	require.Zero(t, b.held())

	require.Zero(t, b.hold(heldRow{key: rowKey{hash: h, user: "a"}, row: FeedRow{UserID: "a", Seq: 102}, announced: 30000},
		seenTorrent{id: "7", at: 30000}, 1000))
	again, torrents := b.take()
	require.Len(t, again, 1)
	require.Equal(t, int64(102), again[0].row.Seq)
	require.Equal(t, &rows[:1][0], &again[0], "the next take fills the slice given back")
	require.Equal(t, seenTorrent{id: "7", at: 30000}, torrents[h])
}
