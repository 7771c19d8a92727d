package swarm

import (
	"bytes"
	"encoding/hex"
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

// feedBatches leaves a round's rows in info-hash, then user order, each
// row whole (its figures moved with its key), and makes one batch per
// torrent over its span of them, whatever order they came in.
func TestFeedBatchesSortsTheRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	hashes := []bittorrent.InfoHash{{}, {0xff}, {19: 1}, {8: 1}, {16: 1}, {0xff, 19: 0xff}}
	for _, n := range []int{0, 1, 2, 3, 17, 200} { // of the 240 records
		var held []heldRow
		seen := map[rowKey]bool{}
		torrents := map[bittorrent.InfoHash]seenTorrent{}
		for len(held) < n {
			k := rowKey{hash: hashes[rng.IntN(len(hashes))], user: strconv.Itoa(rng.IntN(40))}
			if seen[k] {
				continue
			}
			seen[k] = true
			torrents[k.hash] = seenTorrent{id: hex.EncodeToString(k.hash[:])}
			held = append(held, heldRow{key: k, announced: int64(len(held)),
				row: FeedRow{UserID: k.user, Seq: int64(len(held)), Uploaded: int64(1000 + len(held))}})
		}
		want := slices.Clone(held)
		slices.SortFunc(want, func(a, b heldRow) int {
			if c := bytes.Compare(a.key.hash[:], b.key.hash[:]); c != 0 {
				return c
			}
			return strings.Compare(a.key.user, b.key.user)
		})
		var order []heldOrder
		batches, spans := feedBatches(held, torrents, &order)
		require.Equal(t, want, held, "%d rows", n)
		require.Len(t, batches, len(torrents))
		for i, b := range batches {
			require.Equal(t, hex.EncodeToString(b.InfoHash[:]), b.TorrentID)
			for j, row := range b.Rows {
				h := held[spans[i].first+j]
				require.Equal(t, b.InfoHash, h.key.hash)
				require.Equal(t, h.row, row)
			}
			require.Equal(t, spans[i].end-spans[i].first, len(b.Rows))
		}
	}
}
