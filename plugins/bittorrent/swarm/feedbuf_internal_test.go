package swarm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The buffer holds every change's row in the order of the changes; past
// the cap the oldest go, and the oldest announce dropped is kept until a
// scan that saw no later drop clears it. The round (feedBatches) keeps
// each record's newest row, and each torrent's newest counters with the
// last time a reply showed a seeder.
func TestFeedBufferHoldsTheChangesInOrder(t *testing.T) {
	var b feedBuffer
	b.init()
	h1, h2 := bittorrent.InfoHash{1}, bittorrent.InfoHash{2}
	row := func(hash bittorrent.InfoHash, user string, seq, at int64, seen seenTorrent) heldRow {
		return heldRow{key: rowKey{hash: hash, user: user}, row: FeedRow{UserID: user, Seq: seq}, announced: at, torrent: seen}
	}
	require.Zero(t, b.hold(row(h1, "a", 1, 100, seenTorrent{id: "1", seeders: 1, lastAction: 100, at: 100}), 4))
	require.Zero(t, b.hold(row(h1, "b", 1, 110, seenTorrent{id: "1", seeders: 0, leechers: 2, at: 110}), 4))
	require.Zero(t, b.hold(row(h1, "a", 2, 120, seenTorrent{id: "1", seeders: 0, leechers: 3, at: 120}), 4))
	require.Zero(t, b.hold(row(h1, "a", 1, 100, seenTorrent{id: "1", seeders: 1, lastAction: 100, at: 100}), 4),
		"an older row put back is held too: the round keeps the newest")
	require.Equal(t, 4, b.held())
	select {
	case <-b.wake:
	default:
		t.Fatal("half the cap held wakes the feed loop")
	}
	require.Equal(t, 1, b.hold(row(h2, "a", 5, 130, seenTorrent{id: "2", at: 130}), 4), "past the cap")
	from, gen := b.droppedSince()
	require.Equal(t, int64(100), from, "the oldest change went: a's seq 1")
	require.Equal(t, 1, b.hold(row(h2, "b", 1, 140, seenTorrent{id: "2", at: 140}), 4))
	b.recovered(gen)
	from, gen = b.droppedSince()
	require.Equal(t, int64(100), from, "a drop after the scan began keeps it")
	b.recovered(gen)
	from, _ = b.droppedSince()
	require.Zero(t, from)

	taken := b.take()
	require.Equal(t, []int64{120, 100, 130, 140}, []int64{taken[0].announced, taken[1].announced, taken[2].announced,
		taken[3].announced}, "oldest change first; b's and a's first rows went")
	require.Zero(t, b.held())
	require.Equal(t, int64(2), b.dropped)

	var order []heldOrder
	batches, spans, held := feedBatches(taken, &order)
	require.Len(t, held, 3, "a's two rows on h1 are one")
	require.Len(t, batches, 2)
	require.Equal(t, []FeedRow{{UserID: "a", Seq: 2}}, batches[0].Rows, "the newest row of the record")
	require.Equal(t, FeedBatch{InfoHash: h1, TorrentID: "1", Leechers: 3, LastAction: 100, Announced: 120,
		Rows: batches[0].Rows}, batches[0], "the newest reply's counters, the last seeder's time kept")
	require.Equal(t, heldSpan{0, 1}, spans[0])
	require.Equal(t, []FeedRow{{UserID: "a", Seq: 5}, {UserID: "b", Seq: 1}}, batches[1].Rows)
	require.Equal(t, int64(140), batches[1].Announced)
	require.Equal(t, heldSpan{1, 3}, spans[1])
	b.recycle(taken)

	// The buffer fills one slice while a round holds the other: the slice
	// a round gives back is the one the round after next takes.
	require.Zero(t, b.hold(row(h2, "c", 1, 150, seenTorrent{id: "2", at: 150}), 4))
	between := b.take()
	require.Len(t, between, 1)
	b.recycle(between)
	require.Zero(t, b.hold(row(h2, "c", 2, 160, seenTorrent{id: "2", at: 160}), 4))
	again := b.take()
	require.Len(t, again, 1)
	require.Equal(t, int64(2), again[0].row.Seq)
	require.Same(t, &taken[:1][0], &again[0], "the slice given back is filled again")
}

// A long overflow: the dropped front is cut off, so the slice stays
// within a few times the cap, and the rows held are the newest cap.
func TestFeedBufferCutsTheDroppedFront(t *testing.T) {
	var b feedBuffer
	b.init()
	h := bittorrent.InfoHash{7}
	const capRows = 100
	dropped := 0
	for n := int64(1); n <= 10_000; n++ {
		dropped += b.hold(heldRow{key: rowKey{hash: h, user: "u"}, row: FeedRow{UserID: "u", Seq: n}, announced: n}, capRows)
		require.LessOrEqual(t, len(b.rows), 3*capRows)
	}
	require.Equal(t, 10_000-capRows, dropped)
	require.Equal(t, capRows, b.held())
	taken := b.take()
	require.Equal(t, int64(10_000-capRows+1), taken[0].row.Seq)
	require.Equal(t, int64(10_000), taken[len(taken)-1].row.Seq)
	var order []heldOrder
	batches, _, held := feedBatches(taken, &order)
	require.Len(t, held, 1)
	require.Equal(t, []FeedRow{{UserID: "u", Seq: 10_000}}, batches[0].Rows)
}
