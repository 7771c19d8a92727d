package btplugin

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The feed's outbox events (docs/bittorrent-site.md, "The feed").
const (
	TransfersEventKind = "transfers"
	SnatchEventKind    = "snatch"
)

// TransfersVersion is the version a "transfers" event's body carries. 1
// was the kind "transfer", one torrent per event (its body is now one
// element of Torrents); 2 carries many torrents' rows in one event, so a
// feed round costs the outbox a few events per shard, not one per
// torrent.
const TransfersVersion = 2

// TransfersEvent is a "transfers" event's body: the rows of many torrents
// of one feed round, each torrent with its counters as read. A torrent
// with more rows than fit one event is in several, each with its
// counters.
type TransfersEvent struct {
	Version  int             `json:"version"`
	Torrents []TransferEvent `json:"torrents"`
}

// TransferEvent is one torrent's part of a "transfers" event: its
// counters as read, and the cumulative figures of the users whose
// figures changed.
type TransferEvent struct {
	InfoHash     string        `json:"info_hash"`
	TorrentID    string        `json:"torrent_id"`
	Seeders      int64         `json:"seeders"`
	Leechers     int64         `json:"leechers"`
	Snatches     int64         `json:"snatches"`
	LastSeeded   *time.Time    `json:"last_seeded,omitempty"`
	LastActivity *time.Time    `json:"last_activity,omitempty"`
	Rows         []TransferRow `json:"rows"`
}

// TransferRow is one user's cumulative figures on the torrent at seq.
// Key is "<user_id>:<info_hash>:<seq>": the site drops a key it has seen
// and keeps the newest seq per user and torrent, so a row delivered twice
// (a retry, a crash mid-flush, two frontends) counts once.
type TransferRow struct {
	Key          string     `json:"key"`
	UserID       string     `json:"user_id"`
	Seq          int64      `json:"seq"`
	Uploaded     int64      `json:"uploaded"`
	Downloaded   int64      `json:"downloaded"`
	UpCredited   int64      `json:"up_credited"`
	DownCredited int64      `json:"down_credited"`
	SeedSeconds  int64      `json:"seed_seconds"`
	LeechSeconds int64      `json:"leech_seconds"`
	Snatched     *time.Time `json:"snatched,omitempty"`
}

// SnatchEvent is a "snatch" event's body: the user's first completion of
// the torrent. Its key, "snatch:<user_id>:<info_hash>", is the same each
// time the feed sends it.
type SnatchEvent struct {
	UserID    string    `json:"user_id"`
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	At        time.Time `json:"at"`
}

// transfersBodyBudget bounds a transfers event's body, well under
// outbox.MaxBodyBytes and about the size of version 1's largest event
// (100 rows): a row is at most about 350 bytes.
const transfersBodyBudget = 32 << 10

// feedDeliverer appends feed batches to the outbox, all in one append
// (one script call for a round's shard, not one per torrent): transfers
// events of at most transfersBodyBudget bytes, the torrents in info-hash
// order and each torrent's rows in user order, each keyed by a digest of
// its rows' keys (the same rows make the same key), and a snatch event
// per snatched row that this frontend has not appended yet.
type feedDeliverer struct {
	ob       *outbox.Outbox
	snatches *appendedKeys
}

func newFeedDeliverer(ob *outbox.Outbox) feedDeliverer {
	return feedDeliverer{ob: ob, snatches: &appendedKeys{keys: make(map[string]struct{})}}
}

func (d feedDeliverer) deliver(ctx context.Context, batches []swarm.FeedBatch) error {
	events, err := feedEvents(batches, d.snatches.has)
	if err != nil {
		return err
	}
	// One append: the events are stored together or not at all.
	if err := d.ob.Append(ctx, events); err != nil {
		return err
	}
	for _, e := range events {
		if e.Kind == SnatchEventKind {
			d.snatches.add(e.Key)
		}
	}
	return nil
}

// appendedKeys remembers snatch events this frontend appended. A row
// carries its user's snatch time in every round after the snatch (most
// seeders' rows), and each copy of the event cost the outbox a dedup
// look-up to drop it; a key remembered here was appended once, durably,
// so leaving its copies out changes nothing the site receives. Bounded:
// past maxAppendedKeys an arbitrary key is forgotten, and its next copy
// goes to the outbox, which drops it, as before. Another frontend, or
// this one after a restart, sends a copy once.
type appendedKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

const maxAppendedKeys = 1 << 16

func (a *appendedKeys) has(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.keys[key]
	return ok
}

func (a *appendedKeys) add(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.keys[key]; !ok && len(a.keys) >= maxAppendedKeys {
		for old := range a.keys { // map order: an arbitrary key goes
			delete(a.keys, old)
			break
		}
	}
	a.keys[key] = struct{}{}
}

// transferPiece is a TransferEvent whose rows are marshalled already, so
// an event's size is known as it is filled.
type transferPiece struct {
	TransferEvent
	Rows []json.RawMessage `json:"rows"`
}

// transfersBuilder fills transfers events up to transfersBodyBudget.
type transfersBuilder struct {
	events  []outbox.Event
	torrent TransferEvent     // the torrent being added (its rows unused)
	pieces  []json.RawMessage // the event's finished torrents
	rows    []json.RawMessage // the torrent's rows in this event
	keys    []string          // the event's row keys
	size    int               // the event's body size so far, about
}

// the body's fixed part, `{"version":2,"torrents":[]}`, and the commas
const transfersFrame = 32

func (t *transfersBuilder) addRow(row TransferRow) error {
	text, err := json.Marshal(row)
	if err != nil {
		return err
	}
	if len(t.keys) > 0 && t.size+len(text)+1 > transfersBodyBudget {
		if err := t.closeEvent(); err != nil {
			return err
		}
	}
	if len(t.rows) == 0 {
		head, err := json.Marshal(transferPiece{TransferEvent: t.torrent})
		if err != nil {
			return err
		}
		t.size += len(head) + 1
	}
	t.rows = append(t.rows, text)
	t.keys = append(t.keys, row.Key)
	t.size += len(text) + 1
	return nil
}

// closeTorrent ends the current torrent's piece of the event.
func (t *transfersBuilder) closeTorrent() error {
	if len(t.rows) == 0 {
		return nil
	}
	piece, err := json.Marshal(transferPiece{TransferEvent: t.torrent, Rows: t.rows})
	if err != nil {
		return err
	}
	t.pieces, t.rows = append(t.pieces, piece), nil
	return nil
}

// closeEvent ends the event; the current torrent goes on in the next.
func (t *transfersBuilder) closeEvent() error {
	if err := t.closeTorrent(); err != nil {
		return err
	}
	if len(t.pieces) == 0 {
		return nil
	}
	body, err := json.Marshal(struct {
		Version  int               `json:"version"`
		Torrents []json.RawMessage `json:"torrents"`
	}{TransfersVersion, t.pieces})
	if err != nil {
		return err
	}
	t.events = append(t.events, outbox.Event{Key: transfersKey(t.keys), Kind: TransfersEventKind, Body: body})
	t.pieces, t.keys, t.size = nil, nil, transfersFrame
	return nil
}

// transfersKey is a transfers event's idempotency key:
// "transfers:<rows>:<the first 8 bytes of the SHA-1 of the row keys, each
// followed by a newline, in the event's order>".
func transfersKey(rowKeys []string) string {
	digest := sha1.New()
	for _, k := range rowKeys {
		digest.Write([]byte(k + "\n"))
	}
	return "transfers:" + strconv.Itoa(len(rowKeys)) + ":" + hex.EncodeToString(digest.Sum(nil)[:8])
}

// feedEvents is a round's events for batches: the transfers events,
// then a snatch event per snatched row whose key appended does not have.
func feedEvents(batches []swarm.FeedBatch, appended func(key string) bool) ([]outbox.Event, error) {
	at := func(ms int64) *time.Time {
		if ms <= 0 {
			return nil
		}
		t := time.UnixMilli(ms).UTC()
		return &t
	}
	sorted := make([]swarm.FeedBatch, len(batches))
	copy(sorted, batches)
	sort.Slice(sorted, func(i, j int) bool { return string(sorted[i].InfoHash[:]) < string(sorted[j].InfoHash[:]) })
	builder := transfersBuilder{size: transfersFrame}
	var snatches []outbox.Event
	for _, b := range sorted {
		hash := btstore.HexInfoHash(b.InfoHash)
		builder.torrent = TransferEvent{InfoHash: hash, TorrentID: b.TorrentID, Seeders: b.Seeders, Leechers: b.Leechers,
			Snatches: b.Snatches, LastSeeded: at(b.LastAction), LastActivity: at(b.Announced)}
		rows := make([]swarm.FeedRow, len(b.Rows))
		copy(rows, b.Rows)
		sort.Slice(rows, func(i, j int) bool { return rows[i].UserID < rows[j].UserID })
		for _, r := range rows {
			err := builder.addRow(TransferRow{Key: swarm.FeedKey(r.UserID, b.InfoHash, r.Seq), UserID: r.UserID, Seq: r.Seq,
				Uploaded: r.Uploaded, Downloaded: r.Downloaded, UpCredited: r.UpCredited, DownCredited: r.DownCredited,
				SeedSeconds: r.SeedMillis / 1000, LeechSeconds: r.LeechMillis / 1000, Snatched: at(r.Snatched)})
			if err != nil {
				return nil, err
			}
			if r.Snatched == 0 {
				continue
			}
			if key := "snatch:" + r.UserID + ":" + hash; !appended(key) {
				body, err := json.Marshal(SnatchEvent{UserID: r.UserID, InfoHash: hash, TorrentID: b.TorrentID, At: *at(r.Snatched)})
				if err != nil {
					return nil, err
				}
				snatches = append(snatches, outbox.Event{Key: key, Kind: SnatchEventKind, Body: body})
			}
		}
		if err := builder.closeTorrent(); err != nil {
			return nil, err
		}
	}
	if err := builder.closeEvent(); err != nil {
		return nil, err
	}
	return append(builder.events, snatches...), nil
}
