package swarm

import (
	"sync"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The feed's rows in memory (S5, s43: docs/bittorrent-site.md, "Building
// S5"). The announce scripts number a change of a record's fed figures
// and return the record's row at the new seq (prelude's user_feed); the
// frontend that answered keeps the rows here until a feed round delivers
// the newest of each record. Nothing of a row is written to Redis: if the
// frontend dies first, the record's seq and writer stamp are what
// another frontend's backstop delivers it from (FeedDeadWriters).
//
// The buffer is bounded. At half its cap (Config.FeedBufferRows) the feed
// loop is woken for a round at once; past the cap the oldest rows are
// dropped, counted and logged, and this frontend's "fed up to" stays
// before the oldest it dropped (feedUpTo) until its own scan of the
// records it stamped since then delivered them (feedDropped). A refused
// delivery puts its rows back; rows are cumulative, so a newer row of
// the record held meanwhile carries the change, and the round delivers
// only the newest row of each record (feedBatches).

// defaultFeedBufferRows is Config.FeedBufferRows's default: a row is some
// 250 bytes held, so 25 MB at most.
const defaultFeedBufferRows = 100_000

// rowKey names one user's record on one torrent.
type rowKey struct {
	hash bittorrent.InfoHash
	user string
}

// heldRow is one change's row, the time of the announce that made it
// (ms): the batch's last activity, and what "fed up to" must stay before
// if the row is dropped, and its torrent's counters as the same reply
// said them.
type heldRow struct {
	key       rowKey
	row       FeedRow
	announced int64
	torrent   seenTorrent
}

// seenTorrent is a torrent's counters as the reply that carried one of
// its rows said them (the lead's decision 3: taken from the replies, not
// read by the round). lastAction is 0 when the reply showed no seeder:
// the round then takes another row's, or reads the stored one.
type seenTorrent struct {
	id                          string
	seeders, leechers, snatches int64
	lastAction                  int64
	at                          int64
}

// The rows are values in one slice, in the order of their change: a hold
// is an append under the lock, and nothing else. Until s52 a hold also
// kept the newest row per record, by a map from record to slot and a map
// of the torrents' newest counters: two look-ups in maps of a round's
// records, which cost the frontend about 1 µs an announce in cache
// misses (perf, s52), to save the round the rows a record's second
// change replaced, which a client's announces a feed interval apart
// rarely make. The round sorts the rows anyway (feedBatches): there the
// newest row per record and each torrent's newest counters come for a
// comparison each. A round takes the slice and gives it back (recycle)
// for the round after, so held rows cost no allocation per announce.
type feedBuffer struct {
	mu sync.Mutex
	// rows from front on are the held rows in order of their change,
	// the oldest first; before front are the dropped
	rows  []heldRow
	front int
	// spare is a round's rows given back: the next take fills them
	spare []heldRow
	// spareOrder is a round's sort scratch given back (sortHeld)
	spareOrder []heldOrder
	// dropped counts the rows dropped past the cap since the store was
	// made; droppedFrom is the oldest announce among those not yet
	// recovered by the frontend's own scan (0: none), and droppedGen
	// moves with every drop, so a scan clears droppedFrom only if
	// nothing was dropped while it ran.
	dropped     int64
	droppedFrom int64
	droppedGen  int64
	// wake has room for one signal: the feed loop's round at once.
	wake chan struct{}
}

func (b *feedBuffer) init() {
	b.wake = make(chan struct{}, 1)
}

// hold keeps r, a change's row with its torrent's counters, and drops
// the oldest rows past capRows. It reports how many it dropped. A row
// older than one held for its record (put back by a refused delivery)
// is kept too: the round delivers the newest.
func (b *feedBuffer) hold(r heldRow, capRows int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, r)
	held := len(b.rows) - b.front
	if held >= capRows/2 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	if held <= capRows {
		return 0
	}
	dropped := 0
	for ; held > capRows; held-- {
		h := &b.rows[b.front]
		b.front++
		if b.droppedFrom == 0 || h.announced < b.droppedFrom {
			b.droppedFrom = max(h.announced, 1)
		}
		b.droppedGen++
		b.dropped++
		dropped++
	}
	// The dropped front is cut off once it is most of the slice.
	if b.front >= 64 && b.front > held {
		n := copy(b.rows, b.rows[b.front:])
		clear(b.rows[n:]) // the strings of the rows gone
		b.rows, b.front = b.rows[:n], 0
	}
	return dropped
}

// take empties the buffer: its rows, oldest first. The caller gives them
// back with recycle once it is done with them.
func (b *feedBuffer) take() []heldRow {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rows) == b.front {
		return nil
	}
	clear(b.rows[:b.front]) // the strings of the dropped rows
	rows := b.rows[b.front:]
	b.rows, b.front, b.spare = b.spare[:0], 0, nil
	return rows
}

// recycle gives back what take returned, for the next take to fill.
func (b *feedBuffer) recycle(rows []heldRow) {
	clear(rows)
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(rows) > cap(b.spare) {
		b.spare = rows[:0]
	}
}

// takeOrder is the sort scratch a round gave back, for the next round's
// sortHeld (nil: none; the sort makes one); recycleOrder gives it back.
func (b *feedBuffer) takeOrder() []heldOrder {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.spareOrder
	b.spareOrder = nil
	return o
}

func (b *feedBuffer) recycleOrder(o []heldOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(o) > cap(b.spareOrder) {
		b.spareOrder = o[:0]
	}
}

// held is how many rows the buffer holds (a record changed twice since
// the last round holds two).
func (b *feedBuffer) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rows) - b.front
}

// droppedSince is the oldest announce among the rows dropped and not yet
// recovered (0: none) and the drops' generation.
func (b *feedBuffer) droppedSince() (int64, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.droppedFrom, b.droppedGen
}

// recovered clears what droppedSince said once the frontend's own scan
// delivered the records it stamped since then, unless more were dropped
// meanwhile.
func (b *feedBuffer) recovered(gen int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.droppedGen == gen {
		b.droppedFrom = 0
	}
}
