package swarm

import (
	"container/list"
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

type feedBuffer struct {
	mu       sync.Mutex
	rows     map[rowKey]*list.Element // of *heldRow in order: the oldest change first
	order    list.List
	torrents map[bittorrent.InfoHash]seenTorrent
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
	b.rows = make(map[rowKey]*list.Element)
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
	if el, ok := b.rows[r.key]; ok {
		// Replaced in place and moved to the newest end: a record's
		// every change after its first costs no allocation.
		h := el.Value.(*heldRow)
		if h.row.Seq >= r.row.Seq {
			return 0
		}
		*h = r
		b.order.MoveToBack(el)
	} else {
		b.rows[r.key] = b.order.PushBack(&r)
	}
	if old, ok := b.torrents[r.key.hash]; !ok || t.at >= old.at {
		if t.lastAction == 0 {
			t.lastAction = old.lastAction
		}
		b.torrents[r.key.hash] = t
	} else if t.lastAction > old.lastAction {
		old.lastAction = t.lastAction
		b.torrents[r.key.hash] = old
	}
	if len(b.rows) >= capRows/2 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	dropped := 0
	for len(b.rows) > capRows {
		el := b.order.Front()
		h := el.Value.(*heldRow)
		b.order.Remove(el)
		delete(b.rows, h.key)
		if b.droppedFrom == 0 || h.announced < b.droppedFrom {
			b.droppedFrom = max(h.announced, 1)
		}
		b.droppedGen++
		b.dropped++
		dropped++
	}
	return dropped
}

// take empties the buffer: its rows, oldest first, and the counters of
// their torrents.
func (b *feedBuffer) take() ([]heldRow, map[bittorrent.InfoHash]seenTorrent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.rows) == 0 {
		return nil, nil
	}
	rows := make([]heldRow, 0, len(b.rows))
	for el := b.order.Front(); el != nil; el = el.Next() {
		rows = append(rows, *el.Value.(*heldRow))
	}
	torrents := b.torrents
	b.rows = make(map[rowKey]*list.Element, len(rows))
	b.order.Init()
	b.torrents = make(map[bittorrent.InfoHash]seenTorrent)
	return rows, torrents
}

// held is how many rows the buffer holds.
func (b *feedBuffer) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.rows)
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
