package btplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TokenEventKind is the outbox event a personal token's first use or end
// becomes (docs/bittorrent-site.md shows one as sent).
const TokenEventKind = "token"

// TokenEvent is a "token" event's body.
type TokenEvent struct {
	// Event is "used" (the first announce whose download the token made
	// free) or "ended" (the first announce at or after its end, once used).
	Event     string    `json:"event"`
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	UserID    string    `json:"user_id"`
	Used      time.Time `json:"used"` // the grant's first use: the same in both events of one grant
	At        time.Time `json:"at"`
}

// tokenReporter appends a "token" event for each token event the store
// reports. The key names the user, torrent, grant (by its first use) and
// event, so an event appended twice is stored once.
type tokenReporter struct {
	ob     *outbox.Outbox
	logger *slog.Logger
}

func (r tokenReporter) report(ctx context.Context, e swarm.TokenEvent) {
	hash := btstore.HexInfoHash(e.InfoHash)
	body, err := json.Marshal(TokenEvent{Event: string(e.Kind), InfoHash: hash, TorrentID: e.TorrentID, UserID: e.UserID,
		Used: e.Used, At: e.At})
	if err == nil {
		err = r.ob.Append(ctx, []outbox.Event{{
			Key:  fmt.Sprintf("token:%s:%s:%d:%s", e.UserID, hash, e.Used.UnixMilli(), e.Kind),
			Kind: TokenEventKind, Body: body,
		}})
	}
	if err != nil {
		// The credit itself stands (the user's record holds token_used
		// and token_ended); only the event is lost.
		r.logger.WarnContext(ctx, "could not report a token event to the site", "info_hash", hash, "user", e.UserID, "error", err)
	}
}
