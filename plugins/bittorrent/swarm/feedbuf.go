package swarm

import (
	"sync"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// The feed's rows in memory (S5, s43: docs/bittorrent-site.md, "Building
// S5"). The announce scripts number a change of a record's fed figures
// and return the record's row at the new seq (prelude's user_feed); the
// frontend that answered keeps the newest row per record here until a
// feed round delivers it. Nothing of a row is written to Redis: if the
// frontend dies first, the record's seq and writer stamp are what
// another frontend's backstop delivers it from (FeedDeadWriters).
//
// The buffer is bounded. At half its cap (Config.FeedBufferRows) the feed
// loop is woken for a round at once; past the cap the oldest rows are
// dropped, counted and logged, and this frontend's "fed up to" stays
// before the oldest it dropped (feedUpTo) until its own scan of the
// records it stamped since then delivered them (feedDropped). A refused
// delivery puts its rows back, unless a newer row of the record came in
// meanwhile: rows are cumulative, so the newer one carries the change.

// defaultFeedBufferRows is Config.FeedBufferRows's default: a row is some
// 200 bytes held, so 20 MB at most.
const defaultFeedBufferRows = 100_000

// rowKey names one user's record on one torrent.
type rowKey struct {
	hash bittorrent.InfoHash
	user string
}

// heldRow is one record's newest row and the time of the announce that
// changed it (ms): the batch's last activity, and what "fed up to" must
// stay before if the row is dropped.
type heldRow struct {
	key       rowKey
	row       FeedRow
	announced int64
	// replaced: a newer row of the record came in after this one (its
	// slot in feedBuffer.rows is dead)
	replaced bool
}

// seenTorrent is a torrent's counters as the newest reply that carried one
// of its rows said them (the lead's decision 3: taken from the replies,
// not read by the round). lastAction is 0 when no reply showed a seeder:
// the round then reads the stored one.
type seenTorrent struct {
	id                          string
	seeders, leechers, snatches int64
	lastAction                  int64
	at                          int64
}

// The rows are values in one slice, in the order of their change, and a
// map from record to slot: a record's change appends its row and marks
// the one it replaces dead, and the slice is compacted once the dead
// outnumber the live. A round takes them into a second slice, which it
// gives back (recycle) for the round after, and the map and slices are
// cleared, not made again: held rows cost the feed loop no allocation
// per announce, and the GC no list element and row box per record
// (docs/bittorrent-site.md, "The plugin's CPU").
type feedBuffer struct {
	mu sync.Mutex
	// slot is each held record's newest row's index in rows
	slot map[rowKey]int
	// rows from front on are the held rows in order of their change,
	// the oldest first, with the dead (replaced) among them; before front
	// are the dropped
	rows  []heldRow
	front int
	live  int
	// torrents are the counters of the held rows' torrents
	torrents map[bittorrent.InfoHash]seenTorrent
	// spare is a round's rows and counters given back: the next take
	// fills them
	spare         []heldRow
	spareTorrents map[bittorrent.InfoHash]seenTorrent
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
	b.slot = make(map[rowKey]int)
	b.torrents = make(map[bittorrent.InfoHash]seenTorrent)
	b.wake = make(chan struct{}, 1)
}

// hold keeps row as its record's newest (an older one held is replaced;
// a row older than the one held, put back by a refused delivery, is
// not), with the torrent's counters from the same reply, and drops the
// oldest rows past capRows. It reports how many it dropped.
func (b *feedBuffer) hold(r heldRow, t seenTorrent, capRows int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	r.replaced = false
	if i, ok := b.slot[r.key]; ok {
		// The newer row goes to the newest end: the record's change is
		// the newest.
		if b.rows[i].row.Seq >= r.row.Seq {
			return 0
		}
		b.rows[i].replaced = true
		b.slot[r.key] = len(b.rows)
	} else {
		b.slot[r.key] = len(b.rows)
		b.live++
	}
	b.rows = append(b.rows, r)
	if old, ok := b.torrents[r.key.hash]; !ok || t.at >= old.at {
		if t.lastAction == 0 {
			t.lastAction = old.lastAction
		}
		b.torrents[r.key.hash] = t
	} else if t.lastAction > old.lastAction {
		old.lastAction = t.lastAction
		b.torrents[r.key.hash] = old
	}
	if b.live >= capRows/2 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	dropped := 0
	for b.live > capRows {
		h := &b.rows[b.front]
		b.front++
		if h.replaced {
			continue
		}
		delete(b.slot, h.key)
		b.live--
		if b.droppedFrom == 0 || h.announced < b.droppedFrom {
			b.droppedFrom = max(h.announced, 1)
		}
		b.droppedGen++
		b.dropped++
		dropped++
	}
	if dead := len(b.rows) - b.live; dead > b.live && dead >= 64 {
		b.compact()
	}
	return dropped
}

// compact moves the live rows to the slice's start, in order, and their
// slots with them.
func (b *feedBuffer) compact() {
	n := 0
	for i := b.front; i < len(b.rows); i++ {
		if b.rows[i].replaced {
			continue
		}
		if n != i {
			b.rows[n] = b.rows[i]
			b.slot[b.rows[n].key] = n
		}
		n++
	}
	clear(b.rows[n:]) // the strings of the rows gone
	b.rows, b.front = b.rows[:n], 0
}

// take empties the buffer: its rows, oldest first, and the counters of
// their torrents. The caller gives both back with recycle once it is
// done with them.
func (b *feedBuffer) take() ([]heldRow, map[bittorrent.InfoHash]seenTorrent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.live == 0 {
		return nil, nil
	}
	rows := b.spare[:0]
	if cap(rows) < b.live {
		rows = make([]heldRow, 0, b.live)
	}
	for i := b.front; i < len(b.rows); i++ {
		if !b.rows[i].replaced {
			rows = append(rows, b.rows[i])
		}
	}
	torrents := b.torrents
	b.torrents = b.spareTorrents
	if b.torrents == nil {
		b.torrents = make(map[bittorrent.InfoHash]seenTorrent, len(torrents))
	}
	b.spare, b.spareTorrents = nil, nil
	clear(b.rows)
	b.rows, b.front, b.live = b.rows[:0], 0, 0
	clear(b.slot)
	return rows, torrents
}

// recycle gives back what take returned, for the next take to fill.
func (b *feedBuffer) recycle(rows []heldRow, torrents map[bittorrent.InfoHash]seenTorrent) {
	clear(rows)
	clear(torrents)
	b.mu.Lock()
	defer b.mu.Unlock()
	if cap(rows) > cap(b.spare) {
		b.spare = rows[:0]
	}
	if torrents != nil && b.spareTorrents == nil {
		b.spareTorrents = torrents
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

// held is how many rows the buffer holds.
func (b *feedBuffer) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live
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
