package swarm

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// The transfer ledger and the cheat signals (docs/bittorrent-site.md,
// "Ledger and cheat signals"). The script that credits an announce's
// transfer to the user's record (prelude's user_announce, from
// announce.lua and refresh.lua alike) writes the announce's ledger entry
// into the record in the same HSET (prelude's user_ledger), and returns
// the figures the signals need (the record's raw download, the time since
// the peer's previous announce, the swarm's other leechers, the torrent's
// last leecher departure and size); the frontend checks the three
// per-torrent signals from them and, only when a signal's figures cross
// its threshold, checks and sets its once-per-period stamp
// (cheat_stamp.lua) in its batched flush. So a frontend killed before its
// flush loses at most a flush interval of signals, never credit nor a
// ledger entry. The many-addresses signal spans torrents, so it lives in
// the user's own slot: each frontend sends a (user, address) it has not
// sent lately to cheat_addrs.lua, which keeps the user's active
// addresses.

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

// signalsEnabled says whether a per-torrent signal is on.
func (w WatchConfig) signalsEnabled() bool {
	return w.NoLeecher || w.MaxUploadRate > 0 || w.DownloadFactor > 0
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

// The per-torrent signals, by their stamp field's index in cheatFields.
const (
	cheatNoLeecher = iota
	cheatUploadRate
	cheatOverDownload
)

// cheatFields are the user record's fields stamping when each
// per-torrent signal last fired on it (ms), so a signal fires once per
// user, torrent and period (cheat_stamp.lua).
var cheatFields = [...]string{"cheat_no_leecher", "cheat_upload_rate", "cheat_over_download"}

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

// watchFigures are one announce's figures for the cheat signals: from
// its credit reply (creditReply.watch), for an announce with accounting
// on that moved transfer.
type watchFigures struct {
	gap         int64 // ms since the peer's previous announce, 0: unknown
	others      int64 // the swarm's leechers now, the announcing peer not counted
	leecherLeft int64 // ms of the torrent's last leecher departure, 0: never
	size        int64 // the torrent's size (bytes), 0: unknown
	downloaded  int64 // the user's raw download on the torrent, this announce's included
}

// cheatCheck is one announce's signals whose figures crossed their
// thresholds, waiting for the flush to check their stamps.
type cheatCheck struct {
	key     string // the user-torrent record
	at      int64  // ms of the announce
	signals []CheatSignal
	codes   []int // each signal's index in cheatFields
}

// watchTransfer checks the watch figures of one announce with transfer
// (at: its time, ms; moved: raw and credited deltas) against the cheat
// signals' thresholds, and puts the signals it may fire into the batch
// the flush checks (their stamps). Its ledger entry is the script's
// (prelude's user_ledger).
func (s *Store) watchTransfer(hash bittorrent.InfoHash, torrentID, userID string, at int64, moved transfer, f watchFigures) {
	w := s.cfg.Watch
	if userID == "" || !w.signalsEnabled() {
		return
	}
	dUp, dDown := moved[0], moved[1]
	var check *cheatCheck
	hit := func(code int, sig CheatSignal) {
		if check == nil {
			check = &cheatCheck{key: btstore.UserTorrentKey(hash, userID), at: at}
		}
		sig.InfoHash, sig.TorrentID, sig.UserID, sig.At = hash, torrentID, userID, time.UnixMilli(at).UTC()
		check.signals = append(check.signals, sig)
		check.codes = append(check.codes, code)
	}
	if w.NoLeecher && dUp > 0 && f.gap > 0 && f.others == 0 && f.leecherLeft < at-f.gap {
		sig := CheatSignal{Kind: SignalNoLeecher, Uploaded: dUp, PreviousAnnounce: time.UnixMilli(at - f.gap).UTC()}
		if f.leecherLeft > 0 {
			sig.LastLeecherLeft = time.UnixMilli(f.leecherLeft).UTC()
		}
		hit(cheatNoLeecher, sig)
	}
	// A rate over at least a second, so two announces close together do
	// not make a burst a rate.
	if w.MaxUploadRate > 0 && f.gap > 0 && float64(dUp)*1000 > float64(w.MaxUploadRate)*float64(max(f.gap, 1000)) {
		hit(cheatUploadRate, CheatSignal{Kind: SignalUploadRate, Uploaded: dUp, Elapsed: time.Duration(f.gap) * time.Millisecond,
			MaxUploadRate: w.MaxUploadRate})
	}
	if w.DownloadFactor > 0 && f.size > 0 && dDown > 0 && float64(f.downloaded) > float64(f.size)*w.DownloadFactor {
		hit(cheatOverDownload, CheatSignal{Kind: SignalOverDownload, Downloaded: f.downloaded, Size: f.size,
			DownloadedDelta: dDown, DownloadFactor: w.DownloadFactor})
	}
	if check == nil {
		return
	}
	s.pending.addCheat(check)
}

// writeCheatChecks checks the stamps of the signals an announce's figures
// fired (cheat_stamp.lua, one call per announce, pipelined) and reports
// those whose stamp let them fire to Config.OnCheat. A check that failed
// goes back into the batch.
func (s *Store) writeCheatChecks(ctx context.Context, checks []*cheatCheck) (failed int, firstErr error) {
	if len(checks) == 0 {
		return 0, nil
	}
	calls := make([]scriptCall, len(checks))
	for i, c := range checks {
		args := make([]any, 0, 2+len(c.codes))
		args = append(args, c.at, s.cfg.Watch.SignalPeriod.Milliseconds())
		for _, code := range c.codes {
			args = append(args, cheatFields[code])
		}
		calls[i] = scriptCall{keys: []string{c.key}, args: args}
	}
	for i, cmd := range s.runScriptsPipelined(ctx, cheatStampScript, calls) {
		fired, err := cmd.Int64Slice()
		if err == nil && len(fired) != len(checks[i].signals) {
			err = errBadReply
		}
		if err != nil {
			failed++
			firstErr = firstError(firstErr, fmt.Errorf("cheat_stamp.lua: %w", err))
			s.pending.addCheat(checks[i])
			continue
		}
		for j, sig := range checks[i].signals {
			if fired[j] != 1 {
				continue
			}
			s.counters.cheats.Add(1)
			if s.cfg.OnCheat != nil {
				s.cfg.OnCheat(ctx, sig)
			}
		}
	}
	return failed, firstErr
}

// CheatsFired counts the cheat signals this Store's announces fired.
func (s *Store) CheatsFired() int64 { return s.counters.cheats.Load() }

// addressSeen remembers the (user, address) pairs this frontend sent to
// cheat_addrs.lua, and when, so a client's repeated announces (every
// interval, on every torrent) cost nothing until a quarter of the window
// has passed. It is asked on every announce with accounting on, so a
// look-up takes no lock and touches one cache line: a pair is one 64-bit
// key (addressPair), which modulo the buckets picks one of addressWays
// slots (32 bytes, aligned in a table made whole), and a slot holds the key's high half as a tag and the send's
// time, in one word loaded and stored atomically. Until s52 each of 64
// shards had a mutex and a map: some 1.3 µs an announce in the at-once
// bench (perf -a), a lock's line and the map's groups, cold between one
// user's announces. A full bucket forgets its oldest send, and two
// frontend goroutines sending one pair at once both send: either only
// costs one call more. The table (maxAddressesCached slots, 8 bytes
// each) is made at the first look-up.
type addressSeen struct {
	once  sync.Once
	slots []atomic.Uint64
}

// addressWays is the slots of one bucket: 32 bytes, in one cache line.
const addressWays = 4

// A slot is the key's high 32 bits (tag), with its lowest bit set so no
// tag is an empty slot's 0, above the send's time in ms, kept modulo 2^32
// (49.7 days): ages are differences modulo 2^32, exact for any age that
// matters here (a quarter window), and a clock gone back reads as a very
// old send.
func addressSlot(key uint64, now int64) uint64 { return addressTag(key)<<32 | uint64(uint32(now)) }

func addressTag(key uint64) uint64 { return key>>32 | 1 }

func (a *addressSeen) bucket(key uint64) []atomic.Uint64 {
	a.once.Do(func() { a.slots = make([]atomic.Uint64, maxAddressesCached) })
	buckets := uint64(len(a.slots) / addressWays)
	i := int(key%buckets) * addressWays
	return a.slots[i : i+addressWays : i+addressWays]
}

// addressPair is a (user, counted address) pair: the user by its ID's
// 64-bit hash (addressSeed), the address by the 64 bits addressCounted
// leaves (an IPv4 address the low half of its IPv4-mapped form, an IPv6
// address's /64 its high half) and its family.
type addressPair struct {
	user uint64
	addr uint64
	is6  bool
}

// addressSeed keys the users' hashes; per process, so no user ID can be
// chosen to collide with another's.
var addressSeed = maphash.MakeSeed()

func addressPairOf(user string, addr netip.Addr) addressPair {
	counted := addressCounted(addr)
	a := counted.As16()
	if counted.Is4() {
		return addressPair{user: maphash.String(addressSeed, user), addr: binary.BigEndian.Uint64(a[8:])}
	}
	return addressPair{user: maphash.String(addressSeed, user), addr: binary.BigEndian.Uint64(a[:8]), is6: true}
}

// key is the pair's map key: the user's hash, the address mixed in by a
// bijection, the family in the low bit. Two pairs share a key only if
// their users' seeded hashes differ by what their addresses do (odds of
// 2^-64 per two pairs, some 3e-10 for a full cache); then the one's send
// would wait out the other's quarter window.
func (p addressPair) key() uint64 {
	m := bits.RotateLeft64(p.addr*0x9e3779b97f4a7c15, 31) * 0xbf58476d1ce4e5b9
	k := p.user ^ m
	if p.is6 {
		k ^= 1
	}
	return k
}

// sentLately says whether the pair was sent within the last `within` ms
// before now (a clock gone back does not count); when not, it records now
// as the pair's send, in the pair's slot or else the bucket's oldest.
func (a *addressSeen) sentLately(p addressPair, now, within int64) bool {
	k := p.key()
	bucket, tag := a.bucket(k), addressTag(k)
	oldest, oldestAge := 0, uint32(0)
	for i := range bucket {
		v := bucket[i].Load()
		age := uint32(now) - uint32(v)
		if v>>32 == tag {
			if int64(age) < within {
				return true
			}
			bucket[i].Store(addressSlot(k, now))
			return false
		}
		if v == 0 {
			age = math.MaxUint32 // an empty slot goes first
		}
		if age >= oldestAge {
			oldest, oldestAge = i, age
		}
	}
	bucket[oldest].Store(addressSlot(k, now))
	return false
}

// forget drops the pair's send, when it failed, so the next announce
// sends it again.
func (a *addressSeen) forget(p addressPair) {
	k := p.key()
	bucket, tag := a.bucket(k), addressTag(k)
	for i := range bucket {
		if v := bucket[i].Load(); v>>32 == tag {
			bucket[i].CompareAndSwap(v, 0)
		}
	}
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
	pair := addressPairOf(userID, addr)
	if s.addresses.sentLately(pair, now, w.AddressWindow.Milliseconds()/4) {
		return
	}
	address := addressOf(addr)
	reply, err := s.runScriptList(ctx, "swarm: cheat_addrs.lua", cheatAddrsScript, btstore.CheatAddrsKeys(userID),
		now, w.AddressWindow.Milliseconds(), w.MaxAddresses, w.SignalPeriod.Milliseconds(), maxAddressesKept, address, now)
	if err != nil {
		s.addresses.forget(pair)
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

// ledgerOf reads a record's ledger (prelude's user_ledger: fields "l0",
// "l1", ..., each "time,up,down,credited up,credited down,,previous
// announce's time", times in ms, a credited figure empty when it equals
// the raw one, the previous time empty when unknown; entries written
// before s56 end in the elapsed ms itself: "time,up,down,credited
// up,credited down,elapsed"), newest first. An entry that does not parse
// is skipped: only the scripts write them.
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
		prev := ""
		switch {
		case len(f) == 7 && f[5] == "":
			prev = f[6]
			f = f[:6]
			f[5] = "0"
		case len(f) != 6:
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
		if ok && prev != "" {
			at, err := strconv.ParseInt(prev, 10, 64)
			ok = err == nil
			n[5] = max(0, n[0]-at)
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
