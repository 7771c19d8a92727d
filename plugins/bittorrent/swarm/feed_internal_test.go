package swarm

import (
	"bytes"
	"encoding/hex"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

func TestFeedRowParsesUserFeedsLayout(t *testing.T) {
	const text = "3,4000,28000,4000,0,1800000,5400000,1764367200000,1764370800000"
	want := storedFeedRow{FeedRow: FeedRow{UserID: "u7", Seq: 3, Uploaded: 4000, Downloaded: 28000, UpCredited: 4000,
		DownCredited: 0, SeedMillis: 1800000, LeechMillis: 5400000, Snatched: 1764367200000}, announced: 1764370800000}
	row, legacy, ok := parseFeedRow("u7:3", text)
	require.True(t, ok)
	require.False(t, legacy)
	require.Equal(t, want, row)
	// An earlier build's row, under the user id alone.
	row, legacy, ok = parseFeedRow("u7", text)
	require.True(t, ok)
	require.True(t, legacy)
	require.Equal(t, want, row)
	for _, bad := range []string{"", "3", "3,4000,28000,4000,0,1800000,5400000,0", "3,4000,28000,4000,0,1800000,5400000,0,1,2",
		"3,4000,x,4000,0,1800000,5400000,0,1", "3,4000,-1,4000,0,1800000,5400000,0,1", "3,4000,,4000,0,1800000,5400000,0,1"} {
		_, _, ok := parseFeedRow("u7:3", bad)
		require.False(t, ok, bad)
	}
	// A field whose seq is not its row's is not fed: only user_feed
	// writes rows, so it is damage.
	_, _, ok = parseFeedRow("u7:4", text)
	require.False(t, ok)
}

// feedBatches leaves a round's newest row per record in info-hash, then
// user order, each row whole (its figures moved with its key), and makes
// one batch per torrent over its span of them, with the newest reply's
// counters and the latest seeder time among all the torrent's rows,
// whatever order they came in.
func TestFeedBatchesSortsTheRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hashes := []bittorrent.InfoHash{{}, {0xff}, {19: 1}, {8: 1}, {16: 1}, {0xff, 19: 0xff}}
	for _, n := range []int{0, 1, 2, 3, 17, 200, 600} { // of the 240 records, some held twice or more
		var taken []heldRow
		newest := map[rowKey]heldRow{}
		type counters struct{ at, lastAction int64 }
		torrents := map[bittorrent.InfoHash]counters{}
		for len(taken) < n {
			k := rowKey{hash: hashes[rng.IntN(len(hashes))], user: strconv.Itoa(rng.IntN(40))}
			at := int64(rng.IntN(1000) + 1)
			seen := seenTorrent{id: hex.EncodeToString(k.hash[:]), seeders: at, at: at}
			if rng.IntN(3) == 0 {
				seen.lastAction = at
			}
			r := heldRow{key: k, announced: at, torrent: seen,
				row: FeedRow{UserID: k.user, Seq: int64(len(taken)), Uploaded: int64(1000 + len(taken))}}
			taken = append(taken, r)
			newest[k] = r // the seqs grow with len(taken)
			c := torrents[k.hash]
			torrents[k.hash] = counters{at: max(c.at, at), lastAction: max(c.lastAction, seen.lastAction)}
		}
		want := slices.Collect(maps.Values(newest))
		slices.SortFunc(want, func(a, b heldRow) int {
			if c := bytes.Compare(a.key.hash[:], b.key.hash[:]); c != 0 {
				return c
			}
			return strings.Compare(a.key.user, b.key.user)
		})
		var order []heldOrder
		batches, spans, held := feedBatches(taken, &order)
		if len(want) == 0 {
			require.Empty(t, held)
		} else {
			require.Equal(t, want, held, "%d rows", n)
		}
		require.Len(t, batches, len(torrents))
		for i, b := range batches {
			require.Equal(t, hex.EncodeToString(b.InfoHash[:]), b.TorrentID)
			require.Equal(t, torrents[b.InfoHash].at, b.Seeders, "the newest reply's counters")
			require.Equal(t, torrents[b.InfoHash].at, b.Announced)
			require.Equal(t, torrents[b.InfoHash].lastAction, b.LastAction, "the latest seeder time of any row")
			for j, row := range b.Rows {
				h := held[spans[i].first+j]
				require.Equal(t, b.InfoHash, h.key.hash)
				require.Equal(t, h.row, row)
			}
			require.Equal(t, spans[i].end-spans[i].first, len(b.Rows))
		}
	}
}
