package btplugin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// FloodEventKind is the outbox event a repeat offender of flood control
// becomes (docs/bittorrent-site.md shows one as sent).
const FloodEventKind = "flood"

// FloodEvent is a "flood" event's body.
type FloodEvent struct {
	InfoHash  string `json:"info_hash"`
	TorrentID string `json:"torrent_id,omitempty"` // private mode
	UserID    string `json:"user_id,omitempty"`    // private mode
	// PeerID is the client's peer_id in hex (it is 20 arbitrary bytes);
	// Client its first 8 bytes where they are printable ASCII, e.g.
	// "-qB4630-", to read the client at a glance.
	PeerID             string    `json:"peer_id"`
	Client             string    `json:"client,omitempty"`
	IP                 string    `json:"ip"`
	Port               uint16    `json:"port"`
	Refusals           int64     `json:"refusals"`
	WindowStart        time.Time `json:"window_start"`
	WindowSeconds      int64     `json:"window_seconds"`
	MinIntervalSeconds int64     `json:"min_interval_seconds"`
}

// floodReporter appends a "flood" event for each repeat offender the
// store reports. The key names the peer and its window, so a report
// appended twice is stored once.
type floodReporter struct {
	ob          *outbox.Outbox
	logger      *slog.Logger
	window      time.Duration
	minInterval time.Duration
}

func (f floodReporter) report(ctx context.Context, r swarm.FloodReport) {
	hash := btstore.HexInfoHash(r.InfoHash)
	peer := hex.EncodeToString(r.PeerID[:])
	body, err := json.Marshal(FloodEvent{
		InfoHash: hash, TorrentID: r.TorrentID, UserID: r.UserID, PeerID: peer, Client: clientPrefix(r.PeerID),
		IP: r.Addr.Addr().String(), Port: r.Addr.Port(), Refusals: r.Refusals, WindowStart: r.Since.UTC(),
		WindowSeconds: int64(f.window / time.Second), MinIntervalSeconds: int64(f.minInterval / time.Second),
	})
	if err == nil {
		err = f.ob.Append(ctx, []outbox.Event{{
			Key:  fmt.Sprintf("flood:%s:%s:%d", hash, peer, r.Since.UnixMilli()),
			Kind: FloodEventKind, Body: body,
		}})
	}
	if err != nil {
		// The refusal itself stands and is counted; only the report is lost.
		f.logger.WarnContext(ctx, "could not report a flooding peer to the site", "info_hash", hash, "error", err)
	}
}

// clientPrefix is the peer_id's first 8 bytes when they are printable
// ASCII (Azureus style "-TR3000-"), else "".
func clientPrefix(id [20]byte) string {
	for _, c := range id[:8] {
		if c < 0x20 || c > 0x7e {
			return ""
		}
	}
	return string(id[:8])
}
