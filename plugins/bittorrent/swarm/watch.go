package swarm

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The transfer ledger and the cheat signals (docs/bittorrent-site.md,
// "Ledger and cheat signals"). The ledger and the three per-torrent
// signals are checked where an announce reaches the user's record on the
// torrent (prelude's user_watch, called by user_announce from
// announce.lua and refresh.lua alike), with accounting on. The
// many-addresses signal spans torrents, so it lives in the user's own
// slot: each frontend sends a (user, address) it has not sent lately to
// cheat_addrs.lua, which keeps the user's active addresses.

// WatchConfig configures the ledger and the cheat signals. They run only
// with accounting on (private mode, Config.NoAccounting false). Zero
// turns each off.
type WatchConfig struct {
	// LedgerEntries is how many of a user's last announces with transfer
	// each user-torrent record keeps (at most MaxLedgerEntries).
	LedgerEntries int
	// SignalPeriod: a signal fires at most once per user, torrent (or,
	// for addresses, user) and period (24h).
	SignalPeriod time.Duration
	// NoLeecher fires on upload reported while the swarm had no other
	// leecher at any time since the peer's previous announce.
	NoLeecher bool
	// MaxUploadRate fires on an upload delta above it (bytes/s) over the
	// time since the peer's previous announce.
	MaxUploadRate int64
	// DownloadFactor fires when a user's raw download on a torrent exceeds
	// the torrent's size (Registration.Size) times it; no size, no check.
	DownloadFactor float64
	// MaxAddresses fires when one user's passkeys announced from more
	// distinct addresses (IPv4, IPv6 /64) than it within AddressWindow
	// (1h), across torrents.
	MaxAddresses  int
	AddressWindow time.Duration
}

// Bounds of WatchConfig.
const (
	MaxLedgerEntries = 1000
	// maxAddressesKept bounds a user's address record, whatever the limit.
	maxAddressesKept = 1000
	// maxAddressesCached bounds the (user, address) pairs a frontend
	// remembers having sent.
	maxAddressesCached = 100_000
)

func (w *WatchConfig) validate() error {
	switch {
	case w.LedgerEntries < 0 || w.LedgerEntries > MaxLedgerEntries:
		return fmt.Errorf("swarm config: Watch.LedgerEntries must be 0 (off) to %d, got %d", MaxLedgerEntries, w.LedgerEntries)
	case w.SignalPeriod < 0 || w.AddressWindow < 0:
		return fmt.Errorf("swarm config: Watch.SignalPeriod and Watch.AddressWindow must not be negative, got %v and %v",
			w.SignalPeriod, w.AddressWindow)
	case w.MaxUploadRate < 0:
		return fmt.Errorf("swarm config: Watch.MaxUploadRate must be 0 (off) or positive bytes/s, got %d", w.MaxUploadRate)
	case w.DownloadFactor < 0 || math.IsNaN(w.DownloadFactor) || math.IsInf(w.DownloadFactor, 0):
		return fmt.Errorf("swarm config: Watch.DownloadFactor must be 0 (off) or a positive number, got %v", w.DownloadFactor)
	case w.DownloadFactor > 0 && w.DownloadFactor < 1:
		return fmt.Errorf("swarm config: Watch.DownloadFactor %v is below 1: every finished download would fire it", w.DownloadFactor)
	case w.MaxAddresses < 0:
		return fmt.Errorf("swarm config: Watch.MaxAddresses must be 0 (off) or positive, got %d", w.MaxAddresses)
	}
	if w.SignalPeriod == 0 {
		w.SignalPeriod = 24 * time.Hour
	}
	if w.AddressWindow == 0 {
		w.AddressWindow = time.Hour
	}
	return nil
}

// arg is the scripts' watch ARGV (prelude's watch_read): "" when the
// ledger and the per-torrent signals are all off.
func (w WatchConfig) arg() string {
	if w.LedgerEntries == 0 && !w.NoLeecher && w.MaxUploadRate == 0 && w.DownloadFactor == 0 {
		return ""
	}
	ghost := 0
	if w.NoLeecher {
		ghost = 1
	}
	return fmt.Sprintf("%d %d %d %d %s", w.LedgerEntries, w.SignalPeriod.Milliseconds(), ghost, w.MaxUploadRate,
		strconv.FormatFloat(w.DownloadFactor, 'f', -1, 64))
}

// CheatSignalKind names a cheat signal.
type CheatSignalKind string

// The cheat signals.
const (
	SignalNoLeecher    CheatSignalKind = "no_leecher"
	SignalUploadRate   CheatSignalKind = "upload_rate"
	SignalOverDownload CheatSignalKind = "over_download"
	SignalAddresses    CheatSignalKind = "addresses"
)

// The per-torrent signals' codes in the scripts' replies (prelude's
// user_watch), named once here and handed to them as R.CHEAT_*; each is
// also the index of the signal's stamp field in prelude's cheat_fields.
const (
	cheatNoLeecher    = 1
	cheatUploadRate   = 2
	cheatOverDownload = 3
)

// CheatSignal is one signal fired, as Config.OnCheat hears of it. The
// figures that fired it are set per kind; the rest are zero.
type CheatSignal struct {
	Kind      CheatSignalKind
	InfoHash  bittorrent.InfoHash // zero for SignalAddresses
	TorrentID string              // "" for SignalAddresses
	UserID    string
	At        time.Time // the announce that fired it

	// no_leecher: Uploaded since PreviousAnnounce, LastLeecherLeft (zero:
	// never) before it. upload_rate: Uploaded over Elapsed, above
	// MaxUploadRate. over_download: Downloaded (the user's total on the
	// torrent, raw) above Size x DownloadFactor, DownloadedDelta this
	// announce's part.
	Uploaded         int64
	PreviousAnnounce time.Time
	LastLeecherLeft  time.Time
	Elapsed          time.Duration
	MaxUploadRate    int64
	Downloaded       int64
	DownloadedDelta  int64
	Size             int64
	DownloadFactor   float64
	// addresses: Active distinct addresses within Window, above
	// MaxAddresses; Addresses the newest of them (at most 20).
	Active       int64
	MaxAddresses int
	Window       time.Duration
	Addresses    []string
}

// reportCheats hands the per-torrent signals of a script's reply (flat:
// code and three figures each) to Config.OnCheat.
func (s *Store) reportCheats(ctx context.Context, fired any, hash bittorrent.InfoHash, torrentID, userID string) {
	list, _ := fired.([]any)
	if len(list) == 0 {
		return
	}
	s.counters.cheats.Add(int64(len(list) / 4))
	if s.cfg.OnCheat == nil {
		return
	}
	ms := func(v any) time.Time {
		if n := replyInt(v); n > 0 {
			return time.UnixMilli(n).UTC()
		}
		return time.Time{}
	}
	for i := 0; i+3 < len(list); i += 4 {
		sig := CheatSignal{InfoHash: hash, TorrentID: torrentID, UserID: userID}
		a, b, c := list[i+1], list[i+2], list[i+3]
		switch replyInt(list[i]) {
		case cheatNoLeecher:
			sig.Kind, sig.Uploaded, sig.PreviousAnnounce, sig.LastLeecherLeft = SignalNoLeecher, replyInt(a), ms(b), ms(c)
		case cheatUploadRate:
			sig.Kind, sig.Uploaded = SignalUploadRate, replyInt(a)
			sig.Elapsed, sig.MaxUploadRate = time.Duration(replyInt(b))*time.Millisecond, replyInt(c)
		case cheatOverDownload:
			sig.Kind, sig.Downloaded, sig.Size, sig.DownloadedDelta = SignalOverDownload, replyInt(a), replyInt(b), replyInt(c)
			sig.DownloadFactor = s.cfg.Watch.DownloadFactor
		default:
			continue
		}
		sig.At = s.clock.Now().UTC()
		s.cfg.OnCheat(ctx, sig)
	}
}

// CheatsFired counts the cheat signals this Store's announces fired.
func (s *Store) CheatsFired() int64 { return s.counters.cheats.Load() }

// addressSeen remembers the (user, address) pairs this frontend sent to
// cheat_addrs.lua, and when, so a client's repeated announces (every
// interval, on every torrent) cost nothing until a quarter of the window
// has passed. Forgotten all at once when full: a forgotten pair only
// costs one call more.
type addressSeen struct {
	mu   sync.Mutex
	sent map[userAddress]int64
}

// userAddress keys addressSeen without building a string per announce:
// the text is made only for the announces that call cheat_addrs.lua.
type userAddress struct {
	user string
	addr netip.Addr // counted (addressCounted)
}

// addressCounted is what the many-addresses signal counts: an IPv4
// address, or an IPv6 address's /64 (privacy addresses change within
// one), as its first address.
func addressCounted(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is4() {
		return addr
	}
	p, _ := addr.Prefix(64)
	return p.Addr()
}

// addressOf is the counted address as cheat_addrs.lua stores it: an IPv4
// address, or an IPv6 /64 prefix.
func addressOf(addr netip.Addr) string {
	counted := addressCounted(addr)
	if counted.Is4() {
		return counted.String()
	}
	return netip.PrefixFrom(counted, 64).String()
}

// watchAddress sends the user's address to cheat_addrs.lua unless this
// frontend sent it within a quarter of the window, and reports the
// many-addresses signal when it fires. Failures are logged, never the
// announce's: the signal is advice to the site.
func (s *Store) watchAddress(ctx context.Context, userID string, addr netip.Addr, now int64) {
	w := s.cfg.Watch
	if w.MaxAddresses == 0 || !s.accounting(userID) {
		return
	}
	pair := userAddress{user: userID, addr: addressCounted(addr)}
	s.addresses.mu.Lock()
	if s.addresses.sent == nil || len(s.addresses.sent) >= maxAddressesCached {
		s.addresses.sent = make(map[userAddress]int64)
	}
	last, ok := s.addresses.sent[pair]
	fresh := ok && now-last < w.AddressWindow.Milliseconds()/4 && now >= last
	if !fresh {
		s.addresses.sent[pair] = now
	}
	s.addresses.mu.Unlock()
	if fresh {
		return
	}
	address := addressOf(addr)
	reply, err := s.runScriptList(ctx, "swarm: cheat_addrs.lua", cheatAddrsScript, btstore.CheatAddrsKeys(userID),
		now, w.AddressWindow.Milliseconds(), w.MaxAddresses, w.SignalPeriod.Milliseconds(), maxAddressesKept, address, now)
	if err != nil {
		s.addresses.mu.Lock()
		delete(s.addresses.sent, pair)
		s.addresses.mu.Unlock()
		s.logger.WarnContext(ctx, "swarm: recording an address for the many-addresses signal failed", "error", err)
		return
	}
	if len(reply) < 2 || replyInt(reply[1]) != 1 {
		return
	}
	s.counters.cheats.Add(1)
	if s.cfg.OnCheat == nil {
		return
	}
	sig := CheatSignal{Kind: SignalAddresses, UserID: userID, At: time.UnixMilli(now).UTC(), Active: replyInt(reply[0]),
		MaxAddresses: w.MaxAddresses, Window: w.AddressWindow}
	for _, a := range reply[2:] {
		sig.Addresses = append(sig.Addresses, replyString(a))
	}
	s.cfg.OnCheat(ctx, sig)
}

// LedgerEntry is one announce with transfer in a user-torrent record's
// ledger. Rates are per second over Elapsed (zero when it is unknown).
type LedgerEntry struct {
	At                       time.Time
	Uploaded, Downloaded     int64 // raw deltas
	UpCredited, DownCredited int64
	Elapsed                  time.Duration // since the peer's previous announce
	UploadRate, DownloadRate float64       // bytes/s
}

// ledgerOf reads a record's ledger (prelude's user_watch: fields "l0",
// "l1", ..., each "time,up,down,credited up,credited down,elapsed ms",
// a credited figure empty when it equals the raw one), newest first. An
// entry that does not parse is skipped: only the scripts write them.
func ledgerOf(fields map[string]string) []LedgerEntry {
	var entries []LedgerEntry
	for name, text := range fields {
		if len(name) < 2 || name[0] != 'l' || name[1] < '0' || name[1] > '9' {
			continue
		}
		if _, err := strconv.Atoi(name[1:]); err != nil {
			continue
		}
		f := strings.Split(text, ",")
		if len(f) != 6 {
			continue
		}
		if f[3] == "" {
			f[3] = f[1]
		}
		if f[4] == "" {
			f[4] = f[2]
		}
		var n [6]int64
		ok := true
		for i, x := range f {
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				ok = false
				break
			}
			n[i] = v
		}
		if !ok {
			continue
		}
		e := LedgerEntry{At: time.UnixMilli(n[0]).UTC(), Uploaded: n[1], Downloaded: n[2], UpCredited: n[3],
			DownCredited: n[4], Elapsed: time.Duration(n[5]) * time.Millisecond}
		if n[5] > 0 {
			e.UploadRate = float64(n[1]) * 1000 / float64(n[5])
			e.DownloadRate = float64(n[2]) * 1000 / float64(n[5])
		}
		entries = append(entries, e)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].At.After(entries[j].At) })
	return entries
}
