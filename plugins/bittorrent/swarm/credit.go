package swarm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// Credited transfer (docs/bittorrent-site.md, "Credited transfer"). Every
// announce's raw deltas are credited, in the announce script (prelude's
// user_announce), with the multipliers in force at that announce: the
// torrent's status (its record), the user's personal token (the user's
// record on the torrent) and the site-wide windows open now, which every
// frontend caches and passes in the script's ARGV. A new or changed
// window applies on this frontend at once and on the others at their next
// hint, at most Config.CacheTTL later; a window's start and end need no
// refresh, since the cached copy holds them and each announce compares
// them with its own time.

// CreditKind is a credit status: a torrent's, or a site-wide window's.
type CreditKind string

// The credit statuses. Rates are percent of the raw transfer credited.
const (
	CreditNormal       CreditKind = "normal"        // upload 100, download 100
	CreditFreeleech    CreditKind = "freeleech"     // upload 100, download 0
	CreditNeutral      CreditKind = "neutral"       // upload 0, download 0: the transfer does not count
	CreditDoubleUpload CreditKind = "double_upload" // upload 200, download 100
	CreditPercentOff   CreditKind = "percent_off"   // upload 100, download 100 - PercentOff
)

// Credit is a credit status; PercentOff (1-99) only with CreditPercentOff.
type Credit struct {
	Kind       CreditKind `json:"kind"`
	PercentOff int        `json:"percent_off,omitempty"`
}

// Rates returns the upload and download rates (percent) of the status,
// or an ErrInvalid error naming what is wrong.
func (c Credit) Rates() (up, down int, err error) {
	if c.Kind != CreditPercentOff && c.PercentOff != 0 {
		return 0, 0, fmt.Errorf("swarm: percent_off is only for kind %q: %w", CreditPercentOff, ErrInvalid)
	}
	switch c.Kind {
	case CreditNormal:
		return 100, 100, nil
	case CreditFreeleech:
		return 100, 0, nil
	case CreditNeutral:
		return 0, 0, nil
	case CreditDoubleUpload:
		return 200, 100, nil
	case CreditPercentOff:
		if c.PercentOff < 1 || c.PercentOff > 99 {
			return 0, 0, fmt.Errorf("swarm: percent_off %d: want 1-99 (0 is normal, 100 freeleech): %w", c.PercentOff, ErrInvalid)
		}
		return 100, 100 - c.PercentOff, nil
	}
	return 0, 0, fmt.Errorf("swarm: credit kind %q: want normal, freeleech, neutral, double_upload or percent_off: %w", c.Kind, ErrInvalid)
}

// creditFromRates reads a stored pair of rates back as a status.
func creditFromRates(up, down int64) Credit {
	switch {
	case up == 100 && down == 100:
		return Credit{Kind: CreditNormal}
	case up == 100 && down == 0:
		return Credit{Kind: CreditFreeleech}
	case up == 0 && down == 0:
		return Credit{Kind: CreditNeutral}
	case up == 200 && down == 100:
		return Credit{Kind: CreditDoubleUpload}
	}
	return Credit{Kind: CreditPercentOff, PercentOff: int(100 - down)}
}

// creditOf reads a torrent record's credit status.
func creditOf(fields map[string]string) Credit {
	up, errUp := strconv.ParseInt(fields["credit_up"], 10, 64)
	down, errDown := strconv.ParseInt(fields["credit_down"], 10, 64)
	if errUp != nil || errDown != nil {
		return Credit{Kind: CreditNormal}
	}
	return creditFromRates(up, down)
}

// combineRates is the rule prelude's credit_rates applies, for the
// windows open at once: the highest upload rate and the lowest download
// rate win, except that a neutral one (upload 0) credits no upload.
func combineRates(up, down, otherUp, otherDown int) (int, int) {
	if up == 0 || otherUp == 0 {
		up = 0
	} else {
		up = max(up, otherUp)
	}
	return up, min(down, otherDown)
}

// SetTorrentCredit sets a registered torrent's credit status; it applies
// from the torrent's next announce on every frontend. ErrNotFound when
// the torrent is not registered.
func (s *Store) SetTorrentCredit(ctx context.Context, hash bittorrent.InfoHash, c Credit) error {
	up, down, err := c.Rates()
	if err != nil {
		return err
	}
	n, err := s.runScriptInt(ctx, "swarm.SetTorrentCredit", creditTorrentScript, btstore.CreditTorrentKeys(hash), up, down)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("swarm: torrent %s is not registered: %w", btstore.HexInfoHash(hash), ErrNotFound)
	}
	return nil
}

// CreditWindow is a site-wide credit window: from Start until End, every
// torrent's transfer is credited with Credit as well (combineRates).
type CreditWindow struct {
	ID string `json:"id"`
	Credit
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// storedWindow is a window as CreditWindowsKey holds it.
type storedWindow struct {
	Kind       CreditKind `json:"kind"`
	PercentOff int        `json:"percent_off,omitempty"`
	Start      int64      `json:"start"`
	End        int64      `json:"end"`
}

// maxWindows bounds the site-wide windows, so the copy every announce
// walks stays short.
const maxWindows = 100

// SetCreditWindow adds or replaces the site-wide window w.ID.
func (s *Store) SetCreditWindow(ctx context.Context, w CreditWindow) error {
	if !validName(w.ID) {
		return fmt.Errorf("swarm: window id %q: want 1-%d characters of A-Z a-z 0-9 _ -: %w", w.ID, maxNameLen, ErrInvalid)
	}
	if w.Kind == CreditNormal {
		return fmt.Errorf("swarm: a window of kind normal changes nothing: %w", ErrInvalid)
	}
	if _, _, err := w.Rates(); err != nil {
		return err
	}
	if w.Start.IsZero() || w.End.IsZero() || !w.End.After(w.Start) {
		return fmt.Errorf("swarm: window %q: want a start and an end after it: %w", w.ID, ErrInvalid)
	}
	body, err := json.Marshal(storedWindow{Kind: w.Kind, PercentOff: w.PercentOff,
		Start: w.Start.UnixMilli(), End: w.End.UnixMilli()})
	if err != nil {
		return err
	}
	if n, err := s.rdb.HLen(ctx, btstore.CreditWindowsKey).Result(); err != nil {
		return fmt.Errorf("swarm.SetCreditWindow: %w", err)
	} else if n >= maxWindows {
		if exists, err := s.rdb.HExists(ctx, btstore.CreditWindowsKey, w.ID).Result(); err != nil || !exists {
			return fmt.Errorf("swarm: there are %d windows already; remove ended ones first: %w", n, ErrInvalid)
		}
	}
	if err := s.rdb.HSet(ctx, btstore.CreditWindowsKey, w.ID, body).Err(); err != nil {
		return fmt.Errorf("swarm.SetCreditWindow: %w", err)
	}
	s.windows.invalidate()
	s.publishHint(ctx, hintWindows)
	return nil
}

// RemoveCreditWindow removes a site-wide window; ErrNotFound when there
// is none of that id.
func (s *Store) RemoveCreditWindow(ctx context.Context, id string) error {
	n, err := s.rdb.HDel(ctx, btstore.CreditWindowsKey, id).Result()
	if err != nil {
		return fmt.Errorf("swarm.RemoveCreditWindow: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("swarm: no window %q: %w", id, ErrNotFound)
	}
	s.windows.invalidate()
	s.publishHint(ctx, hintWindows)
	return nil
}

// CreditWindows lists the site-wide windows by start, as stored (not
// this frontend's cached copy).
func (s *Store) CreditWindows(ctx context.Context) ([]CreditWindow, error) {
	return s.loadWindows(ctx)
}

func (s *Store) loadWindows(ctx context.Context) ([]CreditWindow, error) {
	all, err := s.rdb.HGetAll(ctx, btstore.CreditWindowsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("swarm: credit windows: %w", err)
	}
	windows := make([]CreditWindow, 0, len(all))
	for id, body := range all {
		var w storedWindow
		if err := json.Unmarshal([]byte(body), &w); err != nil {
			s.logger.WarnContext(ctx, "swarm: skipping a credit window that does not parse", "id", id, "error", err)
			continue
		}
		windows = append(windows, CreditWindow{ID: id, Credit: Credit{Kind: w.Kind, PercentOff: w.PercentOff},
			Start: time.UnixMilli(w.Start).UTC(), End: time.UnixMilli(w.End).UTC()})
	}
	sort.Slice(windows, func(i, j int) bool {
		if !windows[i].Start.Equal(windows[j].Start) {
			return windows[i].Start.Before(windows[j].Start)
		}
		return windows[i].ID < windows[j].ID
	})
	return windows, nil
}

type windowCache struct{ refreshed[[]CreditWindow] }

// windowRates are the rates of the windows open at now (ms), from this
// frontend's copy: 100 and 100 when none is. A window is open from its
// start (included) to its end (excluded).
func (s *Store) windowRates(ctx context.Context, now int64) (up, down int, err error) {
	windows, err := s.windows.get(ctx, s.clock.Now(), s.cfg.CacheTTL, s.loadWindows)
	if err != nil {
		return 0, 0, err
	}
	up, down = 100, 100
	for _, w := range windows {
		if w.Start.UnixMilli() <= now && now < w.End.UnixMilli() {
			wUp, wDown, err := w.Rates()
			if err != nil {
				continue // stored by hand: SetCreditWindow checks every window it writes
			}
			up, down = combineRates(up, down, wUp, wDown)
		}
	}
	return up, down, nil
}

// ErrNoToken: the user has no token on the torrent to revoke.
var ErrNoToken = errors.New("no token")

// GrantToken gives a user a personal freeleech token on a registered
// torrent: its download is credited as free until until (zero: for
// ever). The token's first use and its end are reported once each
// (Config.OnToken). Granting again replaces the token and starts its
// reports afresh. ErrNotFound when the torrent is not registered.
func (s *Store) GrantToken(ctx context.Context, hash bittorrent.InfoHash, userID string, until time.Time) error {
	if !validName(userID) {
		return fmt.Errorf("swarm: user id %q: %w", userID, ErrInvalid)
	}
	end := int64(0)
	if !until.IsZero() {
		if end = until.UnixMilli(); end <= s.nowMillis() {
			return fmt.Errorf("swarm: a token ending at %s has ended already: %w", until.UTC().Format(time.RFC3339), ErrInvalid)
		}
	}
	n, err := s.runScriptInt(ctx, "swarm.GrantToken", tokenSetScript, btstore.TokenSetKeys(hash, userID), userID, end)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("swarm: torrent %s is not registered: %w", btstore.HexInfoHash(hash), ErrNotFound)
	}
	return nil
}

// RevokeToken takes a user's token on a torrent away; ErrNoToken when the
// user has none.
func (s *Store) RevokeToken(ctx context.Context, hash bittorrent.InfoHash, userID string) error {
	if !validName(userID) {
		return fmt.Errorf("swarm: user id %q: %w", userID, ErrInvalid)
	}
	n, err := s.runScriptInt(ctx, "swarm.RevokeToken", tokenSetScript, btstore.TokenSetKeys(hash, userID), userID, -1)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("swarm: user %q has no token on %s: %w: %w", userID, btstore.HexInfoHash(hash), ErrNoToken, ErrNotFound)
	}
	return nil
}

// TokenEventKind says what happened to a token.
type TokenEventKind string

// The token events.
const (
	TokenUsed  TokenEventKind = "used"  // the first announce whose download it made free
	TokenEnded TokenEventKind = "ended" // the first announce at or after its end, once used
)

// TokenEvent is one token's first use or end, as OnToken hears of it.
type TokenEvent struct {
	Kind      TokenEventKind
	InfoHash  bittorrent.InfoHash
	TorrentID string
	UserID    string
	// Used is when the token was first used: with the user and torrent it
	// names the grant, so the two events of one grant share it.
	Used time.Time
	At   time.Time // the announce that saw it
}

// UserTorrent is a user's record on one torrent as the admin API shows
// it: raw and credited transfer, and the token.
type UserTorrent struct {
	Uploaded, Downloaded        int64
	UpCredited, DownCredited    int64
	Seq                         int64 // the feed's number of these figures (FeedRow.Seq): the site reconciles its newest row with it
	SeedTime, LeechTime         time.Duration
	Token                       bool
	TokenUntil                  time.Time // zero: it never ends
	TokenUsed, TokenEnded       time.Time // zero: not yet
	FirstAnnounce, LastAnnounce time.Time
	// Ledger is the record's last announces with transfer, newest first
	// (WatchConfig.LedgerEntries; empty when off).
	Ledger []LedgerEntry
}

// UserOnTorrent reads a user's record on a torrent; ErrNotFound when
// there is none.
func (s *Store) UserOnTorrent(ctx context.Context, hash bittorrent.InfoHash, userID string) (UserTorrent, error) {
	if !validName(userID) {
		return UserTorrent{}, fmt.Errorf("swarm: user id %q: %w", userID, ErrInvalid)
	}
	fields, err := s.rdb.HGetAll(ctx, btstore.UserTorrentKey(hash, userID)).Result()
	if err != nil {
		return UserTorrent{}, fmt.Errorf("swarm.UserOnTorrent: %w", err)
	}
	if len(fields) == 0 {
		return UserTorrent{}, fmt.Errorf("swarm: user %q has no record on %s: %w", userID, btstore.HexInfoHash(hash), ErrNotFound)
	}
	num := func(name string) int64 { n, _ := strconv.ParseInt(fields[name], 10, 64); return n }
	at := func(name string) time.Time {
		if ms := num(name); ms > 0 {
			return time.UnixMilli(ms).UTC()
		}
		return time.Time{}
	}
	_, token := fields["token"]
	upCredited, downCredited := s.creditOf(num("uploaded"), num("up_extra")), s.creditOf(num("downloaded"), num("down_extra"))
	return UserTorrent{
		Uploaded: num("uploaded"), Downloaded: num("downloaded"), UpCredited: upCredited, DownCredited: downCredited,
		SeedTime: time.Duration(num("seed_ms")) * time.Millisecond, LeechTime: time.Duration(num("leech_ms")) * time.Millisecond,
		Token: token, TokenUntil: at("token"), TokenUsed: at("token_used"), TokenEnded: at("token_ended"),
		FirstAnnounce: at("first_announce"), LastAnnounce: at("last_announce"), Seq: num("seq"), Ledger: ledgerOf(fields),
	}, nil
}

// creditOf is a credited figure from the raw one and the difference the
// record or the totals store (up_extra, down_extra: prelude's
// user_numbers). With accounting off nothing is credited, as before s43;
// the script then writes no difference, so a record's credited figure
// would otherwise read as its raw one.
func (s *Store) creditOf(raw, extra int64) int64 {
	if s.cfg.NoAccounting {
		return 0
	}
	return raw + extra
}

// runScriptInt runs a script that returns an integer.
func (s *Store) runScriptInt(ctx context.Context, op string, script *luascript.Script, keys []string, args ...any) (int64, error) {
	reply, err := luascript.Run(ctx, s.rdb, script, keys, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	n, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("%s: %w (%T)", op, errBadReply, reply)
	}
	return n, nil
}
