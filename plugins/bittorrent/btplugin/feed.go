package btplugin

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strconv"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The feed's outbox events (docs/bittorrent-site.md, "The feed").
const (
	TransferEventKind = "transfer"
	SnatchEventKind   = "snatch"
)

// TransferEvent is a "transfer" event's body: one torrent's counters as
// read, and the cumulative figures of the users whose figures changed.
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

// transferRowsPerEvent keeps a transfer event well under
// outbox.MaxBodyBytes (a row is at most about 350 bytes).
const transferRowsPerEvent = 100

// feedDeliverer appends feed batches to the outbox, all in one append
// (one script call for a round's shard, not one per torrent): per batch,
// transfer events of at most transferRowsPerEvent rows, ordered by user,
// each keyed by its torrent and a digest of its rows' keys (the same rows
// make the same key), and a snatch event per snatched row.
type feedDeliverer struct{ ob *outbox.Outbox }

func (d feedDeliverer) deliver(ctx context.Context, batches []swarm.FeedBatch) error {
	var events []outbox.Event
	for _, b := range batches {
		var err error
		if events, err = appendFeedEvents(events, b); err != nil {
			return err
		}
	}
	// One append: the events are stored together or not at all.
	return d.ob.Append(ctx, events)
}

// appendFeedEvents appends one batch's events to events.
func appendFeedEvents(events []outbox.Event, b swarm.FeedBatch) ([]outbox.Event, error) {
	hash := btstore.HexInfoHash(b.InfoHash)
	at := func(ms int64) *time.Time {
		if ms <= 0 {
			return nil
		}
		t := time.UnixMilli(ms).UTC()
		return &t
	}
	rows := make([]TransferRow, 0, len(b.Rows))
	for _, r := range b.Rows {
		rows = append(rows, TransferRow{Key: swarm.FeedKey(r.UserID, b.InfoHash, r.Seq), UserID: r.UserID, Seq: r.Seq,
			Uploaded: r.Uploaded, Downloaded: r.Downloaded, UpCredited: r.UpCredited, DownCredited: r.DownCredited,
			SeedSeconds: r.SeedMillis / 1000, LeechSeconds: r.LeechMillis / 1000, Snatched: at(r.Snatched)})
		if r.Snatched > 0 {
			body, err := json.Marshal(SnatchEvent{UserID: r.UserID, InfoHash: hash, TorrentID: b.TorrentID, At: *at(r.Snatched)})
			if err != nil {
				return nil, err
			}
			events = append(events, outbox.Event{Key: "snatch:" + r.UserID + ":" + hash, Kind: SnatchEventKind, Body: body})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].UserID < rows[j].UserID })
	for start := 0; start < len(rows); start += transferRowsPerEvent {
		chunk := rows[start:min(start+transferRowsPerEvent, len(rows))]
		digest := sha1.New()
		for _, r := range chunk {
			digest.Write([]byte(r.Key + "\n"))
		}
		body, err := json.Marshal(TransferEvent{InfoHash: hash, TorrentID: b.TorrentID, Seeders: b.Seeders, Leechers: b.Leechers,
			Snatches: b.Snatches, LastSeeded: at(b.LastAction), LastActivity: at(b.Announced), Rows: chunk})
		if err != nil {
			return nil, err
		}
		events = append(events, outbox.Event{
			Key:  "transfer:" + hash + ":" + strconv.Itoa(len(chunk)) + ":" + hex.EncodeToString(digest.Sum(nil)[:8]),
			Kind: TransferEventKind, Body: body,
		})
	}
	return events, nil
}
