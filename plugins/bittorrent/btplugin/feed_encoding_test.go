package btplugin

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestFeedEventsAreWhatEncodingJSONWrites: the feed's builder writes each
// transfers event byte for byte as the first builds did with
// encoding/json (their code is the oracle below), split at the same rows
// and keyed the same, so a site sees no change and an event re-sent
// across an upgrade keeps its key. Random rounds: many torrents, rows
// past the body budget, snatches, times, ids that need escapes.
func TestFeedEventsAreWhatEncodingJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 37))
	ids := []string{"u1", "user_2", "Zed-9", "a<b", "c>d", "e&f", "del\x7f", "nl\n", "quo\"te", "caf\u00e9", "tab\there"}
	for round := range 60 {
		var batches []swarm.FeedBatch
		for i := range 1 + rng.IntN(40) {
			var b swarm.FeedBatch
			b.InfoHash = bittorrent.InfoHash(sha1.Sum([]byte(fmt.Sprint(round, "-", i))))
			b.TorrentID = ids[rng.IntN(len(ids))] + strconv.Itoa(i)
			b.Seeders, b.Leechers, b.Snatches = rng.Int64N(1000), rng.Int64N(1000), rng.Int64N(1<<40)
			if rng.IntN(3) > 0 {
				b.LastAction = 1_700_000_000_000 + rng.Int64N(1<<36)
			}
			if rng.IntN(4) > 0 {
				b.Announced = 1_700_000_000_000 + rng.Int64N(1<<36)
			}
			for u := range rng.IntN(300) {
				row := swarm.FeedRow{UserID: ids[rng.IntN(len(ids))] + strconv.Itoa(u), Seq: rng.Int64N(1 << 20),
					Uploaded: rng.Int64N(1 << 50), Downloaded: rng.Int64N(1 << 50), UpCredited: rng.Int64N(1 << 51),
					DownCredited: rng.Int64N(1 << 50), SeedMillis: rng.Int64N(1 << 40), LeechMillis: rng.Int64N(1 << 40)}
				if rng.IntN(5) == 0 {
					row.Snatched = 1_700_000_000_000 + rng.Int64N(1<<36)
				}
				b.Rows = append(b.Rows, row)
			}
			batches = append(batches, b)
		}
		seen := func(key string) bool { return len(key)%3 == 0 }
		want, err := oracleFeedEvents(batches, seen)
		require.NoError(t, err)
		got, err := feedEvents(batches, seen)
		require.NoError(t, err)
		require.Equal(t, len(want), len(got), "round %d: events", round)
		for i := range want {
			require.Equal(t, want[i].Key, got[i].Key, "round %d event %d", round, i)
			require.Equal(t, want[i].Kind, got[i].Kind, "round %d event %d", round, i)
			require.Equal(t, string(want[i].Body), string(got[i].Body), "round %d event %d", round, i)
			// the deliverer stores bodies as they are (outbox.AppendMarshalled):
			// json.Marshal's text, which compacting and escaping leave alone
			var compact, escaped bytes.Buffer
			require.NoError(t, json.Compact(&compact, got[i].Body))
			json.HTMLEscape(&escaped, compact.Bytes())
			require.Equal(t, string(got[i].Body), escaped.String(), "round %d event %d", round, i)
		}
	}
}

// TestFeedEventsRefuseATimeJSONCannotWrite: a row whose time is past the
// year 9999 fails the round, as time.Time's MarshalJSON does, and is not
// written wrong.
func TestFeedEventsRefuseATimeJSONCannotWrite(t *testing.T) {
	batch := swarm.FeedBatch{InfoHash: bittorrent.InfoHash{1}, TorrentID: "t1",
		Rows: []swarm.FeedRow{{UserID: "u1", Seq: 1, Snatched: 300_000_000_000_000}}}
	_, err := feedEvents([]swarm.FeedBatch{batch}, func(string) bool { return true })
	require.Error(t, err)
}

// The first builds' transfers builder, as they were (commit fd6db8f),
// each row and torrent marshalled by encoding/json.

// oracleTransferPiece is a TransferEvent whose rows are marshalled already, so
// an event's size is known as it is filled.
type oracleTransferPiece struct {
	TransferEvent
	Rows []json.RawMessage `json:"rows"`
}

// oracleTransfersBuilder fills transfers events up to transfersBodyBudget.
type oracleTransfersBuilder struct {
	events  []outbox.Event
	torrent TransferEvent     // the torrent being added (its rows unused)
	pieces  []json.RawMessage // the event's finished torrents
	rows    []json.RawMessage // the torrent's rows in this event
	keys    []string          // the event's row keys
	size    int               // the event's body size so far, about
}

// the body's fixed part, `{"version":2,"torrents":[]}`, and the commas

func (t *oracleTransfersBuilder) addRow(row TransferRow) error {
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
		head, err := json.Marshal(oracleTransferPiece{TransferEvent: t.torrent})
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
func (t *oracleTransfersBuilder) closeTorrent() error {
	if len(t.rows) == 0 {
		return nil
	}
	piece, err := json.Marshal(oracleTransferPiece{TransferEvent: t.torrent, Rows: t.rows})
	if err != nil {
		return err
	}
	t.pieces, t.rows = append(t.pieces, piece), nil
	return nil
}

// closeEvent ends the event; the current torrent goes on in the next.
func (t *oracleTransfersBuilder) closeEvent() error {
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
	t.events = append(t.events, outbox.Event{Key: oracleTransfersKey(t.keys), Kind: TransfersEventKind, Body: body})
	t.pieces, t.keys, t.size = nil, nil, transfersFrame
	return nil
}

// oracleTransfersKey is a transfers event's idempotency key:
// "transfers:<rows>:<the first 8 bytes of the SHA-1 of the row keys, each
// followed by a newline, in the event's order>".
func oracleTransfersKey(rowKeys []string) string {
	digest := sha1.New()
	for _, k := range rowKeys {
		digest.Write([]byte(k + "\n"))
	}
	return "transfers:" + strconv.Itoa(len(rowKeys)) + ":" + hex.EncodeToString(digest.Sum(nil)[:8])
}

// oracleFeedEvents is a round's events for batches: the transfers events,
// then a snatch event per snatched row whose key appended does not have.
func oracleFeedEvents(batches []swarm.FeedBatch, appended func(key string) bool) ([]outbox.Event, error) {
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
	builder := oracleTransfersBuilder{size: transfersFrame}
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

// BenchmarkFeedEvents is a feed round's events for 200 torrents of 5 rows
// each (a round of announce-private's load), by the builder ("direct"),
// by the deliverer's encoder, whose buffers one round leaves to the next
// ("reused"), and by the first builds' encoding/json one
// ("encoding-json"); ns/row and allocs/op are the plugin's CPU for the
// round's rows before the outbox.
func BenchmarkFeedEvents(b *testing.B) {
	var batches []swarm.FeedBatch
	for i := range 200 {
		batch := swarm.FeedBatch{InfoHash: bittorrent.InfoHash(sha1.Sum([]byte(strconv.Itoa(i)))), TorrentID: strconv.Itoa(i),
			Seeders: 3, Leechers: 7, Snatches: 12, LastAction: 1_700_000_000_000, Announced: 1_700_000_100_000}
		for u := range 5 {
			batch.Rows = append(batch.Rows, swarm.FeedRow{UserID: "u" + strconv.Itoa(u*97+i), Seq: int64(40 + u),
				Uploaded: 1 << 30, Downloaded: 1 << 29, UpCredited: 1 << 30, DownCredited: 1 << 29, SeedMillis: 123_456, LeechMillis: 7_890})
		}
		batches = append(batches, batch)
	}
	for _, v := range []struct {
		name   string
		events func([]swarm.FeedBatch, func(string) bool) ([]outbox.Event, error)
	}{{"direct", feedEvents}, {"reused", reusedFeedEvents()}, {"encoding-json", oracleFeedEvents}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.events(batches, func(string) bool { return true }); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/row")
		})
	}
}

// reusedFeedEvents is feedEvents by one encoder, each call's buffers
// taken back by the next, as the deliverer uses it.
func reusedFeedEvents() func([]swarm.FeedBatch, func(string) bool) ([]outbox.Event, error) {
	e := newFeedEncoder()
	return func(batches []swarm.FeedBatch, appended func(string) bool) ([]outbox.Event, error) {
		e.reuse()
		return e.events(batches, func(key []byte) bool { return appended(string(key)) })
	}
}

// An encoder keeps at most maxFreeBodies event bodies for its next
// delivery, however many one delivery made.
func TestFeedEncoderKeepsABoundedNumberOfBodies(t *testing.T) {
	e := newFeedEncoder()
	for i := range maxFreeBodies + 10 {
		e.builder.events = append(e.builder.events, outbox.Event{Body: make([]byte, 0, 64+i)})
	}
	e.reuse()
	require.Len(t, e.builder.free, maxFreeBodies)
	require.Empty(t, e.builder.events)
}
