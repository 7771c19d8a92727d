package swarm

import (
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// BenchmarkFeedBufferRound is the feed's work per announce in the plugin
// process, Redis left out: announces hold a row each (hold), a quarter
// of them a record's second change in the round, and a round every
// 30,000 announces takes the rows and makes the batches (take,
// feedBatches), over 20,000 torrents of 20 peers and 5,000 users
// (hoard-bench announce-private's pool). allocs/op and B/op are per
// announce.
func BenchmarkFeedBufferRound(b *testing.B) {
	const torrents, peersEach, users, perRound = 20_000, 20, 5_000, 30_000
	hashes := make([]bittorrent.InfoHash, torrents)
	for i := range hashes {
		binary.BigEndian.PutUint64(hashes[i][:], uint64(i)*0x9e3779b97f4a7c15)
	}
	ids := make([]string, users)
	for i := range ids {
		ids[i] = strconv.Itoa(100000 + i)
	}
	var buf feedBuffer
	var order []heldOrder // the round's sort scratch, as feedRound keeps it
	buf.init()
	b.ReportAllocs()
	b.ResetTimer()
	x := uint64(1)
	for n := range b.N {
		x = x*6364136223846793005 + 1442695040888963407
		p := int(x>>33) % (torrents * peersEach)
		if n%4 == 0 && n > 0 {
			p = (p / 97) % (torrents * peersEach) // some records change twice a round
		}
		hash, user := hashes[p/peersEach], ids[p%users]
		buf.hold(heldRow{key: rowKey{hash: hash, user: user}, announced: int64(n),
			row: FeedRow{UserID: user, Seq: int64(n), Uploaded: int64(n)}, torrent: seenTorrent{id: "t", at: int64(n)}}, 100_000)
		if n%perRound == perRound-1 {
			taken := buf.take()
			feedBatches(taken, &order)
			buf.recycle(taken)
		}
	}
}
