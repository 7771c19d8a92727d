package btplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// CheatEventKind is the outbox event a cheat signal becomes
// (docs/bittorrent-site.md shows each as sent).
const CheatEventKind = "cheat"

// CheatEvent is a "cheat" event's body: the signal, who and where, and
// the figures that fired it (only the signal's own are present).
type CheatEvent struct {
	// Signal is no_leecher, upload_rate, over_download or addresses.
	Signal    string    `json:"signal"`
	InfoHash  string    `json:"info_hash,omitempty"`  // not for addresses
	TorrentID string    `json:"torrent_id,omitempty"` // not for addresses
	UserID    string    `json:"user_id"`
	At        time.Time `json:"at"`
	// no_leecher and upload_rate: the upload delta (bytes) that fired it.
	Uploaded int64 `json:"uploaded,omitempty"`
	// no_leecher: the peer's previous announce, and when the torrent's
	// last leecher left before it (absent: never).
	PreviousAnnounce *time.Time `json:"previous_announce,omitempty"`
	LastLeecherLeft  *time.Time `json:"last_leecher_left,omitempty"`
	// upload_rate: the time since the peer's previous announce, the rate
	// over it (at least a second) and the ceiling (bytes/s).
	ElapsedSeconds float64 `json:"elapsed_seconds,omitempty"`
	UploadRate     int64   `json:"upload_rate,omitempty"`
	MaxUploadRate  int64   `json:"max_upload_rate,omitempty"`
	// over_download: the user's raw download on the torrent, this
	// announce's part of it, the torrent's size and the factor (bytes).
	Downloaded      int64   `json:"downloaded,omitempty"`
	DownloadedDelta int64   `json:"downloaded_delta,omitempty"`
	Size            int64   `json:"size,omitempty"`
	DownloadFactor  float64 `json:"download_factor,omitempty"`
	// addresses: the distinct addresses (IPv4, IPv6 /64) active within
	// the window, the limit, and the newest of them (at most 20).
	ActiveAddresses int      `json:"active_addresses,omitempty"`
	MaxAddresses    int      `json:"max_addresses,omitempty"`
	WindowSeconds   int64    `json:"window_seconds,omitempty"`
	Addresses       []string `json:"addresses,omitempty"`
}

// cheatEvent is the body of a signal's event.
func cheatEvent(sig swarm.CheatSignal) CheatEvent {
	e := CheatEvent{Signal: string(sig.Kind), TorrentID: sig.TorrentID, UserID: sig.UserID, At: sig.At.UTC()}
	if sig.InfoHash != (bittorrent.InfoHash{}) {
		e.InfoHash = btstore.HexInfoHash(sig.InfoHash)
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		utc := t.UTC()
		return &utc
	}
	switch sig.Kind {
	case swarm.SignalNoLeecher:
		e.Uploaded, e.PreviousAnnounce, e.LastLeecherLeft = sig.Uploaded, at(sig.PreviousAnnounce), at(sig.LastLeecherLeft)
	case swarm.SignalUploadRate:
		e.Uploaded, e.ElapsedSeconds, e.MaxUploadRate = sig.Uploaded, sig.Elapsed.Seconds(), sig.MaxUploadRate
		// over at least a second, as the check (prelude's user_watch)
		e.UploadRate = sig.Uploaded * 1000 / max(sig.Elapsed.Milliseconds(), 1000)
	case swarm.SignalOverDownload:
		e.Downloaded, e.DownloadedDelta, e.Size, e.DownloadFactor = sig.Downloaded, sig.DownloadedDelta, sig.Size, sig.DownloadFactor
	case swarm.SignalAddresses:
		e.ActiveAddresses, e.MaxAddresses, e.Addresses = int(sig.Active), sig.MaxAddresses, sig.Addresses
		e.WindowSeconds = int64(sig.Window / time.Second)
	}
	return e
}

// cheatReporter appends a "cheat" event for each signal the store fires.
// The store fires each at most once per user, torrent and period; the key
// names the signal, torrent, user and time, so an event appended twice
// is stored once.
type cheatReporter struct {
	ob     *outbox.Outbox
	logger *slog.Logger
}

func (r cheatReporter) report(ctx context.Context, sig swarm.CheatSignal) {
	e := cheatEvent(sig)
	body, err := json.Marshal(e)
	if err == nil {
		err = r.ob.Append(ctx, []outbox.Event{{
			Key:  fmt.Sprintf("cheat:%s:%s:%s:%d", e.Signal, e.InfoHash, e.UserID, e.At.UnixMilli()),
			Kind: CheatEventKind, Body: body,
		}})
	}
	if err != nil {
		// The signal's stamp is set: it fires again a period later at most.
		r.logger.WarnContext(ctx, "could not report a cheat signal to the site", "signal", e.Signal, "user", e.UserID,
			"info_hash", e.InfoHash, "error", err)
	}
}
