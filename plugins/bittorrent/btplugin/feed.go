package btplugin

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
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
	// encoder's buffers are reused from one delivery to the next (the
	// outbox copies the bodies into its records), under mu: the feed
	// loop delivers one call at a time, but Stop's last round may meet
	// a backstop's.
	mu      *sync.Mutex
	encoder *feedEncoder
}

func newFeedDeliverer(ob *outbox.Outbox) feedDeliverer {
	return feedDeliverer{ob: ob, snatches: &appendedKeys{keys: make(map[string]struct{})}, mu: new(sync.Mutex),
		encoder: newFeedEncoder()}
}

func (d feedDeliverer) deliver(ctx context.Context, batches []swarm.FeedBatch) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	events, err := d.encoder.events(batches, d.snatches.has)
	defer d.encoder.reuse()
	if err != nil {
		return err
	}
	// One append: the events are stored together or not at all. Their
	// bodies are json.Marshal's text (feedEvents), so the outbox stores
	// them without compacting them again.
	if err := d.ob.AppendMarshalled(ctx, events); err != nil {
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

func (a *appendedKeys) has(key []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.keys[string(key)] // no string made for the look-up
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

// transfersBuilder fills transfers events up to transfersBodyBudget,
// writing each event's body as encoding/json would marshal its
// TransfersEvent (feed_encoding_test.go checks it byte for byte), once:
// a row is written straight into the body and its key into the event's
// digest, with no reflection and no re-scan of marshalled parts. A feed
// round writes about one row per crediting announce, so this is per
// announce work (docs/bittorrent-site.md, "The plugin's CPU").
type transfersBuilder struct {
	events []outbox.Event
	body   []byte // the event being filled, from `{"version":2,"torrents":[`
	// head is the current torrent's piece up to its rows, `{…,"rows":[`,
	// which opens the torrent in each event it has rows in
	head    []byte
	pieces  int       // the event's torrents so far
	rows    int       // the current torrent's rows in this event
	keys    int       // the event's rows
	digest  hash.Hash // SHA-1 of the event's row keys, each followed by a newline
	size    int       // the event's body size so far, about (the split rule of the first builds)
	row     []byte    // scratch: the row being written
	key     []byte    // scratch: the row's key
	scratch []byte    // scratch: a time's text
	sum     [sha1.Size]byte
	// free are the bodies of a delivery done with, for the next one's
	// events (reuse)
	free [][]byte
}

// the body's fixed part, `{"version":2,"torrents":[]}`, and the commas
const transfersFrame = 32

const transfersBodyStart = `{"version":` + "2" + `,"torrents":[`

func newTransfersBuilder() *transfersBuilder {
	return &transfersBuilder{size: transfersFrame, digest: sha1.New()}
}

// startTorrent begins batch b's torrent (hash: its info-hash in hex), as
// its TransferEvent marshals: its piece's head, written into the body
// with its first row in each event. The builder reads the batch itself,
// not a TransferEvent with its times behind pointers: those cost three
// allocations per torrent and row (docs/bittorrent-site.md, "The plugin's
// CPU").
func (t *transfersBuilder) startTorrent(b *swarm.FeedBatch, hash []byte) error {
	h := append(t.head[:0], `{"info_hash":`...)
	h = appendJSONBytes(h, hash)
	h = append(h, `,"torrent_id":`...)
	h = appendJSONString(h, b.TorrentID)
	h = append(h, `,"seeders":`...)
	h = strconv.AppendInt(h, b.Seeders, 10)
	h = append(h, `,"leechers":`...)
	h = strconv.AppendInt(h, b.Leechers, 10)
	h = append(h, `,"snatches":`...)
	h = strconv.AppendInt(h, b.Snatches, 10)
	var err error
	if b.LastAction > 0 {
		h = append(h, `,"last_seeded":`...)
		if h, err = appendJSONMillis(h, b.LastAction); err != nil {
			return err
		}
	}
	if b.Announced > 0 {
		h = append(h, `,"last_activity":`...)
		if h, err = appendJSONMillis(h, b.Announced); err != nil {
			return err
		}
	}
	t.head, t.rows = append(h, `,"rows":[`...), 0
	return nil
}

// addRow adds row of the current torrent (hash: its info-hash in hex), as
// its TransferRow marshals.
func (t *transfersBuilder) addRow(row *swarm.FeedRow, hash []byte) error {
	k := append(t.key[:0], row.UserID...)
	k = append(k, ':')
	k = append(k, hash...)
	k = append(k, ':')
	k = strconv.AppendInt(k, row.Seq, 10)
	r := append(t.row[:0], `{"key":`...)
	r = appendJSONBytes(r, k)
	r = append(r, `,"user_id":`...)
	r = appendJSONString(r, row.UserID)
	for _, f := range [...]struct {
		name string
		n    int64
	}{{`,"seq":`, row.Seq}, {`,"uploaded":`, row.Uploaded}, {`,"downloaded":`, row.Downloaded},
		{`,"up_credited":`, row.UpCredited}, {`,"down_credited":`, row.DownCredited},
		{`,"seed_seconds":`, row.SeedMillis / 1000}, {`,"leech_seconds":`, row.LeechMillis / 1000}} {
		r = append(r, f.name...)
		r = strconv.AppendInt(r, f.n, 10)
	}
	if row.Snatched > 0 {
		r = append(r, `,"snatched":`...)
		var err error
		if r, err = appendJSONMillis(r, row.Snatched); err != nil {
			return err
		}
	}
	r = append(r, '}')
	t.row = r

	if t.keys > 0 && t.size+len(r)+1 > transfersBodyBudget {
		t.closeEvent()
	}
	if t.body == nil {
		t.body = t.newBody(transfersBodyBudget + len(r) + len(t.head) + 8)
	}
	if t.rows == 0 {
		if t.pieces > 0 {
			t.body = append(t.body, ',')
		}
		t.body = append(t.body, t.head...)
		// the first builds counted the head as marshalled without rows,
		// `…,"rows":null}`, and its comma
		t.size += len(t.head) - 1 + len("null}") + 1
	} else {
		t.body = append(t.body, ',')
	}
	t.body = append(t.body, r...)
	// the key and its newline in one write, from the builder's scratch
	// (a []byte{'\n'} literal escaped through the hash.Hash interface:
	// an allocation per row)
	t.key = append(k, '\n')
	t.digest.Write(t.key)
	t.rows++
	t.keys++
	t.size += len(r) + 1
	return nil
}

// closeTorrent ends the current torrent's piece of the event.
func (t *transfersBuilder) closeTorrent() {
	if t.rows == 0 {
		return
	}
	t.body = append(t.body, ']', '}')
	t.pieces++
	t.rows = 0
}

// closeEvent ends the event; the current torrent goes on in the next.
func (t *transfersBuilder) closeEvent() {
	t.closeTorrent()
	if t.pieces == 0 {
		return
	}
	t.body = append(t.body, ']', '}')
	t.events = append(t.events, outbox.Event{Key: transfersKey(t.keys, t.digest.Sum(t.sum[:0])), Kind: TransfersEventKind, Body: t.body})
	t.body, t.pieces, t.keys, t.size = nil, 0, 0, transfersFrame
	t.digest.Reset()
}

// maxFreeBodies bounds the event bodies a transfersBuilder keeps for the
// next delivery (reuse).
const maxFreeBodies = 32

// newBody is an event's body started, in a body of a delivery done with
// when one is big enough.
func (t *transfersBuilder) newBody(size int) []byte {
	for len(t.free) > 0 {
		b := t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		if cap(b) >= size {
			return append(b[:0], transfersBodyStart...)
		}
	}
	return append(make([]byte, 0, size), transfersBodyStart...)
}

// reuse starts the builder anew, its events' bodies kept for the next
// events: the caller is done with them.
func (t *transfersBuilder) reuse() {
	// At most maxFreeBodies kept: a backstop's delivery of a dead
	// frontend's records can make hundreds of events once, and their
	// bodies (about 33 KB each) would otherwise stay for good.
	for i := range t.events {
		if len(t.free) < maxFreeBodies {
			t.free = append(t.free, t.events[i].Body)
		}
	}
	clear(t.events)
	t.events = t.events[:0]
	t.body, t.pieces, t.rows, t.keys, t.size = nil, 0, 0, 0, transfersFrame
	t.digest.Reset()
}

// transfersKey is a transfers event's idempotency key:
// "transfers:<rows>:<the first 8 bytes of the SHA-1 of the row keys, each
// followed by a newline, in the event's order>".
func transfersKey(rows int, digest []byte) string {
	return "transfers:" + strconv.Itoa(rows) + ":" + hex.EncodeToString(digest[:8])
}

// appendJSONString appends s as encoding/json writes a string: bytes
// that need no escape (every id and key the feed writes) as they are,
// anything else through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !jsonPlain(s[i]) {
			quoted, _ := json.Marshal(s) // a string always marshals
			return append(b, quoted...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendJSONBytes(b []byte, s []byte) []byte {
	for _, c := range s {
		if !jsonPlain(c) {
			return appendJSONString(b, string(s))
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// jsonPlain: encoding/json writes c unescaped in a string (printable
// ASCII but the quote, the backslash and its HTML escapes < > &).
func jsonPlain(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// appendJSONMillis appends the time ms (Unix milliseconds, UTC) as
// time.Time's MarshalJSON does (RFC 3339 with nanoseconds, so the
// milliseconds without their trailing zeros, none when whole), which
// refuses years outside 0-9999. It writes the digits itself: a transfers
// event has two times per torrent and time.Time's AppendFormat, which
// reads a layout, was a fifth of the feed's encoding (s48, the plugin's
// CPU profile of announce-private). TestAppendJSONMillis compares it with
// MarshalJSON.
func appendJSONMillis(b []byte, ms int64) ([]byte, error) {
	secs, milli := floorDivMod(ms, 1000)
	days, ofDay := floorDivMod(secs, 86400)
	year, month, day := civilDate(days)
	if year < 0 || year > 9999 {
		text, err := time.UnixMilli(ms).UTC().MarshalJSON()
		return append(b, text...), err
	}
	hour, minute, second := ofDay/3600, ofDay/60%60, ofDay%60
	b = append(b, '"',
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+month/10), byte('0'+month%10), '-', byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':', byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+second/10), byte('0'+second%10))
	if milli != 0 {
		b = append(b, '.', byte('0'+milli/100))
		if milli%100 != 0 {
			b = append(b, byte('0'+milli/10%10))
			if milli%10 != 0 {
				b = append(b, byte('0'+milli%10))
			}
		}
	}
	return append(b, 'Z', '"'), nil
}

// floorDivMod is n divided by d (> 0) rounded down, and the remainder,
// in [0, d).
func floorDivMod(n, d int64) (int64, int64) {
	q, r := n/d, n%d
	if r < 0 {
		q, r = q-1, r+d
	}
	return q, r
}

// civilDate is the proleptic Gregorian date of a day counted from
// 1970-01-01 (day 0), by whole 400-year eras of 146,097 days counted
// from 0000-03-01, so that the leap day ends a year.
func civilDate(days int64) (year, month, day int64) {
	era, dayOfEra := floorDivMod(days+719468, 146097)
	yearOfEra := (dayOfEra - dayOfEra/1460 + dayOfEra/36524 - dayOfEra/146096) / 365
	dayOfYear := dayOfEra - (365*yearOfEra + yearOfEra/4 - yearOfEra/100)
	shifted := (5*dayOfYear + 2) / 153 // months from March
	day = dayOfYear - (153*shifted+2)/5 + 1
	month = shifted + 3
	if month > 12 {
		month -= 12
	}
	year = yearOfEra + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

// feedEvents is a round's events for batches: the transfers events,
// then a snatch event per snatched row whose key appended does not have.
// batches and their rows are left as they are: a round settles them after
// the delivery.
func feedEvents(batches []swarm.FeedBatch, appended func(key string) bool) ([]outbox.Event, error) {
	return newFeedEncoder().events(batches, func(key []byte) bool { return appended(string(key)) })
}

// feedEncoder makes feedEvents's events in buffers it reuses (reuse),
// so a delivery allocates no event body, scratch or key per row.
type feedEncoder struct {
	builder  *transfersBuilder
	sorted   []*swarm.FeedBatch
	snatches []outbox.Event
	key      []byte          // scratch: a snatch event's key
	rows     []swarm.FeedRow // scratch: a torrent's rows sorted
}

func newFeedEncoder() *feedEncoder { return &feedEncoder{builder: newTransfersBuilder()} }

// reuse takes back the buffers of the events events returned: the
// caller is done with them.
func (e *feedEncoder) reuse() {
	e.builder.reuse()
	clear(e.sorted)
	e.sorted = e.sorted[:0]
	clear(e.snatches)
	e.snatches = e.snatches[:0]
	clear(e.rows)
	e.rows = e.rows[:0]
}

// events is feedEvents, appended asking about a snatch key's bytes. The
// events are valid until reuse.
func (e *feedEncoder) events(batches []swarm.FeedBatch, appended func(key []byte) bool) ([]outbox.Event, error) {
	// A round's batches come in info-hash order (swarm.FeedRound): sorted
	// by pointer only when they are not.
	for i := range batches {
		e.sorted = append(e.sorted, &batches[i])
	}
	byHash := func(a, b *swarm.FeedBatch) int { return bytes.Compare(a.InfoHash[:], b.InfoHash[:]) }
	if !slices.IsSortedFunc(e.sorted, byHash) {
		slices.SortFunc(e.sorted, byHash)
	}
	byUser := func(a, b swarm.FeedRow) int { return strings.Compare(a.UserID, b.UserID) }
	builder := e.builder
	var rows []swarm.FeedRow
	var hash [2 * len(bittorrent.InfoHash{})]byte
	for _, b := range e.sorted {
		hex.Encode(hash[:], b.InfoHash[:])
		if err := builder.startTorrent(b, hash[:]); err != nil {
			return nil, err
		}
		// Most torrents have one row a round, in order already: sorted
		// in a copy only when they are not.
		rows = b.Rows
		if !slices.IsSortedFunc(rows, byUser) {
			e.rows = append(e.rows[:0], rows...)
			rows = e.rows
			slices.SortStableFunc(rows, byUser)
		}
		for i := range rows {
			r := &rows[i]
			if err := builder.addRow(r, hash[:]); err != nil {
				return nil, err
			}
			if r.Snatched <= 0 {
				continue
			}
			// Most snatched rows' events were appended already: the key
			// is made as text only for those that were not.
			e.key = append(append(append(append(e.key[:0], "snatch:"...), r.UserID...), ':'), hash[:]...)
			if appended(e.key) {
				continue
			}
			hashText := string(hash[:])
			body, err := json.Marshal(SnatchEvent{UserID: r.UserID, InfoHash: hashText, TorrentID: b.TorrentID,
				At: time.UnixMilli(r.Snatched).UTC()})
			if err != nil {
				return nil, err
			}
			e.snatches = append(e.snatches, outbox.Event{Key: string(e.key), Kind: SnatchEventKind, Body: body})
		}
		builder.closeTorrent()
	}
	builder.closeEvent()
	events := builder.events
	if len(e.snatches) > 0 {
		// after the transfers events, in the builder's slice: reuse
		// takes only the bodies of the transfers events back
		events = append(events, e.snatches...)
	}
	return events, nil
}
