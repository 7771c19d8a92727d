package reaper

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// Event is one message for the site; Key is its idempotency key (the same
// event produced twice has the same Key).
type Event struct {
	Key  string
	Kind string
	Body json.RawMessage
}

// Publisher takes events to the site (the outbox); nil means events are
// dropped with a debug log.
type Publisher interface {
	Publish(ctx context.Context, events []Event) error
}

// The kinds of events, and what their bodies hold.
const (
	// KindNotice: one uploader's initial or final notices of one run, in
	// one event (NoticeBody). Published by the run before its steps are
	// queued, so no step is done whose notice was not handed over.
	KindNotice = "notice"
	// KindInvite: the snatchers an unseeded torrent's initial notice
	// invited to reseed it (InviteBody).
	KindInvite = "invite"
	// KindRemoved: a torrent was removed, for its uploader and snatchers
	// (RemovedBody).
	KindRemoved = "removed"
	// KindClaim: a user reseeded a torrent in the reaper's process and
	// claimed it (ClaimBody).
	KindClaim = "claim"
	// KindReward: the reward of a claim (RewardBody).
	KindReward = "reward"
)

// NoticeTorrent is one torrent of a notice.
type NoticeTorrent struct {
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	State     string    `json:"state"`      // never or unseeded
	RemovalAt time.Time `json:"removal_at"` // the earliest removal, if no one reseeds or extends it
}

// NoticeBody is a KindNotice event's body: Step is "initial" or "final";
// Run is the run that found the steps due. Key: notice:<step>:<user>:<run ms>.
type NoticeBody struct {
	User     string          `json:"user"`
	Step     string          `json:"step"`
	Run      time.Time       `json:"run"`
	Torrents []NoticeTorrent `json:"torrents"`
}

// InviteBody is a KindInvite event's body. Key: invite:<hash>:<gen>.
type InviteBody struct {
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	Uploader  string    `json:"uploader"`
	Users     []string  `json:"users"`
	Run       time.Time `json:"run"`
}

// RemovedBody is a KindRemoved event's body: the uploader and the
// snatchers (the uploader not among them) to tell. Key: removed:<hash>:<gen>.
type RemovedBody struct {
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	State     string    `json:"state"`
	Uploader  string    `json:"uploader"`
	Snatchers []string  `json:"snatchers"`
	Run       time.Time `json:"run"`
}

// ClaimBody is a KindClaim event's body: First is the first reseeder's
// claim (the others started seeding within the claim window); Snatched
// says whether the user had snatched it. Key: claim:<hash>:<user>.
type ClaimBody struct {
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	User      string    `json:"user"`
	At        time.Time `json:"at"`
	First     bool      `json:"first"`
	Snatched  bool      `json:"snatched"`
	State     string    `json:"state"` // the spell it ended: never or unseeded
}

// RewardBody is a KindReward event's body: Points = Factor x Value, the
// torrent's value as registered (1 when not given). Key: reward:<hash>:<user>.
type RewardBody struct {
	InfoHash  string  `json:"info_hash"`
	TorrentID string  `json:"torrent_id"`
	User      string  `json:"user"`
	Points    float64 `json:"points"`
	Factor    float64 `json:"factor"`
	Value     float64 `json:"value"`
}

func newEvent(kind, key string, body any) Event {
	raw, err := json.Marshal(body)
	if err != nil {
		// The bodies are plain structs: this cannot fail.
		panic(fmt.Sprintf("reaper: marshal %s event: %v", kind, err))
	}
	return Event{Key: key, Kind: kind, Body: raw}
}

func eventKey(kind string, hash bittorrent.InfoHash, rest string) string {
	return kind + ":" + btstore.HexInfoHash(hash) + ":" + rest
}

func noticeKey(step Step, user string, run time.Time) string {
	return KindNotice + ":" + step.scriptStep() + ":" + user + ":" + strconv.FormatInt(run.UnixMilli(), 10)
}

// publish hands events to the Publisher; without one they are dropped
// with a debug log.
func (r *Reaper) publish(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	if r.cfg.Publisher == nil {
		for _, ev := range events {
			r.cfg.Logger.Debug("reaper: no publisher; event dropped", "kind", ev.Kind, "key", ev.Key)
		}
		return nil
	}
	if err := r.cfg.Publisher.Publish(ctx, events); err != nil {
		return fmt.Errorf("reaper: publishing %d events: %w", len(events), err)
	}
	return nil
}
