package swarm_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// eventLog collects what a store reports through a callback (OnCheat,
// OnToken).
type eventLog[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *eventLog[T]) add(_ context.Context, e T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, e)
}

// take returns what was reported since the last take.
func (l *eventLog[T]) take() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.items
	l.items = nil
	return out
}

// all returns everything reported, kept.
func (l *eventLog[T]) all() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}

// cheatLog collects the cheat signals a store fires.
type cheatLog = eventLog[swarm.CheatSignal]

// signals flushes the store, which checks the per-torrent signals'
// stamps and reports those that fire, and takes what log heard since
// its last take.
func (f *fixture) signals(log *cheatLog) []swarm.CheatSignal {
	f.t.Helper()
	f.flush()
	return log.take()
}

func kinds(signals []swarm.CheatSignal) []swarm.CheatSignalKind {
	var out []swarm.CheatSignalKind
	for _, s := range signals {
		out = append(out, s.Kind)
	}
	return out
}

// allSignals turns every signal on with small thresholds a test can
// reach; writes behind are off so each announce runs announce.lua.
func allSignals(log *cheatLog) swarm.Config {
	return swarm.Config{WriteBehind: -1, OnCheat: log.add, Watch: swarm.WatchConfig{
		LedgerEntries: 3, SignalPeriod: time.Hour, NoLeecher: true, MaxUploadRate: 1000, DownloadFactor: 2,
		MaxAddresses: 2, AddressWindow: 10 * time.Minute,
	}}
}

// The ledger keeps the last N announces with transfer, newest first,
// with the raw and credited deltas and the time since the peer's
// previous announce; an announce without transfer adds nothing, and with
// accounting off nothing is kept.
func TestLedgerKeepsTheLastAnnouncesWithTransfer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{WriteBehind: -1, Watch: swarm.WatchConfig{LedgerEntries: 3}})
		ctx := context.Background()
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditDoubleUpload}))
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		var up, down uint64
		for i := 1; i <= 5; i++ {
			f.clock.Advance(time.Duration(i) * time.Minute)
			up, down = up+uint64(100*i), down+uint64(1000*i)
			f.announce(hash, me, 1, passkey("passkeyA"), transfer(up, down))
		}
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(up, down)) // no transfer: no entry
		// The script wrote each entry with its credit, in the same HSET:
		// there is nothing to flush (until s47 the frontend's flush wrote
		// them). The transfers are the record's changes 1 to 5 and the
		// idle announce's leech time its 6th (seq), so the fifth transfer
		// is in slot 5 mod 3.
		fields := b.Client.HGetAll(ctx, btstore.UserTorrentKey(hash, "alice")).Val()
		require.Equal(t, "6", fields["seq"])
		entry := strings.SplitN(fields["l2"], ",", 2)
		require.Len(t, entry, 2)
		require.Equal(t, epoch.Add(15*time.Minute).UnixMilli(), mustInt(t, entry[0]), "the fifth transfer, 15 minutes in")
		require.Equal(t, fmt.Sprintf("500,5000,1000,,,%d", epoch.Add(10*time.Minute).UnixMilli()), entry[1],
			"raw up, raw down, credited up (double), credited down left empty (as raw), the previous announce's time")
		ledger := f.onTorrent(hash, "alice").Ledger
		require.Len(t, ledger, 3)
		for j, e := range ledger {
			i := 5 - j
			require.Equal(t, int64(100*i), e.Uploaded)
			require.Equal(t, int64(1000*i), e.Downloaded)
			require.Equal(t, int64(200*i), e.UpCredited, "double upload")
			require.Equal(t, int64(1000*i), e.DownCredited)
			require.Equal(t, time.Duration(i)*time.Minute, e.Elapsed)
			require.InDelta(t, float64(1000*i)/float64(60*i), e.DownloadRate, 0.001)
		}
		require.True(t, ledger[0].At.After(ledger[1].At), "newest first")
		require.Equal(t, "listpack", b.Client.ObjectEncoding(ctx, btstore.UserTorrentKey(hash, "alice")).Val(),
			"one short field per entry keeps the record compact")

		// accounting off: no ledger
		g, _ := privateFixture(t, b, swarm.Config{WriteBehind: -1, NoAccounting: true, Watch: swarm.WatchConfig{LedgerEntries: 3}})
		other := infoHash("unaccounted")
		require.NoError(t, g.store.RegisterTorrent(ctx, other, "t9"))
		g.announce(other, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		g.clock.Advance(time.Minute)
		g.announce(other, me, 1, passkey("passkeyA"), transfer(10, 10))
		g.flush()
		require.Empty(t, g.onTorrent(other, "alice").Ledger)
		require.False(t, b.Client.HExists(ctx, btstore.UserTorrentKey(other, "alice"), "l0").Val())
	})
}

// Re-announces written behind (refresh.lua) keep the ledger as
// announce.lua does, and a figure past 2^53 (counters a client may report
// up to 2^64) is written whole, not rounded or in exponent form.
func TestLedgerOfWrittenBehindAnnounces(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{Watch: swarm.WatchConfig{LedgerEntries: 4}})
		ctx := context.Background()
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1<<60, 7))
		f.clock.Advance(2 * time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1<<60+4096, 7)) // a delta a double holds at 2^60
		f.flush()                                                             // writes the plain re-announces behind: refresh.lua
		require.EqualValues(t, 2, f.store.WriteBehindStats().Answered, "both re-announces were answered from a view and written behind: refresh.lua")
		ledger := f.onTorrent(hash, "alice").Ledger
		require.Len(t, ledger, 2)
		require.Equal(t, int64(4096), ledger[0].Uploaded)
		require.Equal(t, 2*time.Minute, ledger[0].Elapsed)
		require.Equal(t, int64(1<<60), ledger[1].Uploaded, "2^60 exactly")
		require.Equal(t, int64(7), ledger[1].Downloaded)
		require.Equal(t, time.Minute, ledger[1].Elapsed)
		var texts []string
		for name, v := range b.Client.HGetAll(ctx, btstore.UserTorrentKey(hash, "alice")).Val() {
			if len(name) > 1 && name[0] == 'l' && name[1] >= '0' && name[1] <= '9' {
				texts = append(texts, v)
			}
		}
		require.Len(t, texts, 2)
		for _, text := range texts {
			require.NotContains(t, text, "e+", "no exponent form")
		}
	})
}

func mustInt(t *testing.T, text string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(text, 10, 64)
	require.NoError(t, err)
	return n
}

// Each per-torrent signal fires on its case, once per period, and the
// honest swarm beside it stays quiet: a seeder uploading to a leecher,
// and reporting that upload after the leecher finished.
func TestCheatSignalsFireOnTheirCaseOnly(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log cheatLog
		f, hash := privateFixture(t, b, allSignals(&log))
		ctx := context.Background()
		require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1", Size: 10_000}))
		require.NoError(t, f.store.AddUser(ctx, pk("passkeyC"), "carol"))
		seeder, leecher := peerID("-TR", 1), peerID("-TR", 2)

		// Honest: bob leeches the 10,000 bytes from alice in 20 minutes.
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, leecher, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(5000, 0))
		f.announce(hash, leecher, 2, passkey("passkeyB"), transfer(0, 5000))
		f.clock.Advance(10 * time.Minute)
		// bob finishes and stops before alice's next announce reports the rest
		f.announce(hash, leecher, 2, passkey("passkeyB"), seeding, transfer(0, 10_000), event(bittorrent.EventStopped))
		f.clock.Advance(time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(10_000, 0))
		require.Empty(t, f.signals(&log), "the honest swarm is quiet")

		// No leecher since alice's previous announce: upload is a ghost.
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(12_000, 0))
		got := f.signals(&log)
		require.Equal(t, []swarm.CheatSignalKind{swarm.SignalNoLeecher}, kinds(got))
		require.Equal(t, "alice", got[0].UserID)
		require.Equal(t, "t1", got[0].TorrentID)
		require.Equal(t, int64(2000), got[0].Uploaded)
		require.Equal(t, epoch.Add(21*time.Minute), got[0].PreviousAnnounce)
		require.Equal(t, epoch.Add(20*time.Minute), got[0].LastLeecherLeft)
		// again within the period: stamped, not fired
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(14_000, 0))
		require.Empty(t, f.signals(&log), "once per period")
		f.clock.Advance(time.Hour)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(16_000, 0))
		require.Equal(t, []swarm.CheatSignalKind{swarm.SignalNoLeecher}, kinds(f.signals(&log)), "a period later")

		// carol leeches and reports 2,000,000 bytes up in 10 minutes
		// (3,333 bytes/s over a ceiling of 1,000) and 30,000 down, over
		// twice the size: both fire, and no_leecher does not (she is not
		// alone: bob leeches again).
		cheater := peerID("-TR", 3)
		f.announce(hash, leecher, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.announce(hash, cheater, 3, passkey("passkeyC"), event(bittorrent.EventStarted))
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, cheater, 3, passkey("passkeyC"), transfer(2_000_000, 30_000))
		got = f.signals(&log)
		require.ElementsMatch(t, []swarm.CheatSignalKind{swarm.SignalUploadRate, swarm.SignalOverDownload}, kinds(got))
		for _, s := range got {
			require.Equal(t, "carol", s.UserID)
			switch s.Kind {
			case swarm.SignalUploadRate:
				require.Equal(t, int64(2_000_000), s.Uploaded)
				require.Equal(t, 10*time.Minute, s.Elapsed)
				require.Equal(t, int64(1000), s.MaxUploadRate)
			case swarm.SignalOverDownload:
				require.Equal(t, int64(30_000), s.Downloaded)
				require.Equal(t, int64(30_000), s.DownloadedDelta)
				require.Equal(t, int64(10_000), s.Size)
				require.InDelta(t, 2.0, s.DownloadFactor, 0)
			}
		}
		// bob's honest download (under 2 x size) at an honest rate is quiet
		f.announce(hash, leecher, 2, passkey("passkeyB"), transfer(0, 9_000))
		require.Empty(t, f.signals(&log))

		// A torrent with no size is never checked for over-download.
		unsized := infoHash("unsized")
		require.NoError(t, f.store.RegisterTorrent(ctx, unsized, "t2"))
		f.announce(unsized, cheater, 3, passkey("passkeyC"), event(bittorrent.EventStarted))
		f.announce(unsized, leecher, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(unsized, cheater, 3, passkey("passkeyC"), transfer(0, 1<<40))
		require.Empty(t, f.signals(&log))
		require.Equal(t, int64(4), f.store.CheatsFired(), "every fired signal counted")
	})
}

// One passkey announcing from more distinct addresses than the limit
// within the window, across torrents and frontends, fires once per
// period; IPv6 addresses in one /64 count once, and an address not seen
// for a window no longer counts.
func TestManyAddressesSignal(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log cheatLog
		cfg := allSignals(&log)
		f, hash := privateFixture(t, b, cfg)
		ctx := context.Background()
		second, err := swarm.New(b.Client, swarm.Config{Private: true, WriteBehind: -1, Clock: f.clock, Logger: quietLogger,
			OnCheat: log.add, Watch: cfg.Watch})
		require.NoError(t, err)
		other := infoHash("other")
		require.NoError(t, f.store.RegisterTorrent(ctx, other, "t2"))
		at := func(ip string, port uint16) announceOpt {
			return func(r *bittorrent.AnnounceRequest) { r.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), port) }
		}
		announceOn := func(s *swarm.Store, h bittorrent.InfoHash, peer bittorrent.PeerID, key string, opts ...announceOpt) {
			t.Helper()
			_, err := s.Announce(ctx, request(h, peer, 1, append([]announceOpt{passkey(key)}, opts...)...))
			require.NoError(t, err)
		}
		// bob: one address on two torrents, announcing all along: quiet
		for i := 0; i < 3; i++ {
			announceOn(f.store, hash, peerID("-TR", 20), "passkeyB", at("192.0.2.9", 6881))
			announceOn(second, other, peerID("-TR", 21), "passkeyB", at("192.0.2.9", 6882))
			f.clock.Advance(time.Minute)
		}
		// alice: two IPv6 addresses in one /64 and one IPv4 address: two
		announceOn(f.store, hash, peerID("-TR", 1), "passkeyA", at("2001:db8:1:2::1", 6881))
		announceOn(second, other, peerID("-TR", 2), "passkeyA", at("2001:db8:1:2::ffff", 6881))
		announceOn(f.store, other, peerID("-TR", 3), "passkeyA", at("198.51.100.7", 6881))
		require.Empty(t, f.signals(&log), "two addresses are within the limit")
		// a third, through the other frontend, on another torrent
		announceOn(second, hash, peerID("-TR", 4), "passkeyA", at("203.0.113.5", 6881))
		got := f.signals(&log)
		require.Len(t, got, 1)
		require.Equal(t, swarm.SignalAddresses, got[0].Kind)
		require.Equal(t, "alice", got[0].UserID)
		require.Equal(t, int64(3), got[0].Active)
		require.ElementsMatch(t, []string{"2001:db8:1:2::/64", "198.51.100.7", "203.0.113.5"}, got[0].Addresses)
		// a fourth within the period: not again
		announceOn(f.store, hash, peerID("-TR", 5), "passkeyA", at("203.0.113.6", 6881))
		require.Empty(t, f.signals(&log))
		// after the window the old addresses no longer count, and after the
		// period two addresses are still within the limit
		f.clock.Advance(2 * time.Hour)
		announceOn(f.store, hash, peerID("-TR", 5), "passkeyA", at("203.0.113.6", 6881))
		announceOn(second, hash, peerID("-TR", 6), "passkeyA", at("203.0.113.7", 6881))
		require.Empty(t, f.signals(&log))
		n, err := b.Client.ZCard(ctx, btstore.UserAddressesKey("alice")).Result()
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
	})
}

// A frontend sends a (user, address) to cheat_addrs.lua once per quarter
// of the window: a user's announces from that address (or another in its
// IPv6 /64) within it leave the address's last-seen time alone, another
// user's from the same address are sent for that user, and the first
// announce after the quarter sends it again.
func TestAddressSentOncePerQuarterWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log cheatLog
		f, hash := privateFixture(t, b, allSignals(&log)) // window 10m: a quarter is 2m30s
		ctx := context.Background()
		at := func(ip string) announceOpt {
			return func(r *bittorrent.AnnounceRequest) { r.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), 6881) }
		}
		seen := func(user, address string) int64 {
			t.Helper()
			ms, err := b.Client.ZScore(ctx, btstore.UserAddressesKey(user), address).Result()
			require.NoError(t, err)
			return int64(ms)
		}
		first := f.clock.Now().UnixMilli()
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), at("192.0.2.9"))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyA"), at("2001:db8:1:2::1"))
		require.Equal(t, first, seen("alice", "192.0.2.9"))
		require.Equal(t, first, seen("alice", "2001:db8:1:2::/64"))

		f.clock.Advance(2 * time.Minute)
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), at("192.0.2.9"))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyA"), at("2001:db8:1:2::ffff"))
		f.announce(hash, peerID("-TR", 3), 3, passkey("passkeyB"), at("192.0.2.9"))
		require.Equal(t, first, seen("alice", "192.0.2.9"), "sent within the quarter: not again")
		require.Equal(t, first, seen("alice", "2001:db8:1:2::/64"), "the same /64: not again")
		require.Equal(t, f.clock.Now().UnixMilli(), seen("bob", "192.0.2.9"), "another user's pair is its own")

		f.clock.Advance(time.Minute)
		f.announce(hash, peerID("-TR", 1), 1, passkey("passkeyA"), at("192.0.2.9"))
		f.announce(hash, peerID("-TR", 2), 2, passkey("passkeyA"), at("2001:db8:1:2::2"))
		require.Equal(t, f.clock.Now().UnixMilli(), seen("alice", "192.0.2.9"), "after the quarter: sent again")
		require.Equal(t, f.clock.Now().UnixMilli(), seen("alice", "2001:db8:1:2::/64"))
		require.Empty(t, log.take(), "two addresses are within the limit")
	})
}

// A leecher that times out (expire.lua) stamps its departure too: a
// seeder that uploaded to it before, and reports that upload after the
// sweep removed it, stays quiet; its next upload with nobody there
// fires.
func TestExpiredLeecherKeepsTheSeederQuiet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log cheatLog
		f, hash := privateFixture(t, b, allSignals(&log))
		ctx := context.Background()
		seeder, leecher := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, leecher, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.clock.Advance(40 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding)
		f.clock.Advance(21 * time.Minute) // the leecher's deadline (60m) passed
		removed, err := f.store.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, removed)
		f.clock.Advance(9 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(3000, 0))
		require.Empty(t, f.signals(&log), "it uploaded while the leecher was there")
		f.clock.Advance(10 * time.Minute)
		f.announce(hash, seeder, 1, passkey("passkeyA"), seeding, transfer(4000, 0))
		got := f.signals(&log)
		require.Equal(t, []swarm.CheatSignalKind{swarm.SignalNoLeecher}, kinds(got))
		require.Equal(t, epoch.Add(61*time.Minute), got[0].LastLeecherLeft)
	})
}

// A plain re-announce written behind (refresh.lua) fires the same
// signals as announce.lua: through prelude's user_announce.
func TestWrittenBehindReannounceFiresTheSignals(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log cheatLog
		cfg := allSignals(&log)
		cfg.WriteBehind = 0 // the default: on
		f, hash := privateFixture(t, b, cfg)
		ctx := context.Background()
		require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1", Size: 1000}))
		me, other := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), seeding, event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), seeding) // the view read, with its refresh
		require.Empty(t, f.signals(&log))
		f.clock.Advance(100 * time.Millisecond)
		// two seeders, no leecher ever: alice's upload is a ghost, at
		// 100,000 bytes/s over the 100ms since its previous announce
		f.announce(hash, me, 1, passkey("passkeyA"), seeding, transfer(10_000, 0))
		require.Equal(t, 1, f.store.WriteBehindStats().Queued, "answered from the view, queued")
		require.Empty(t, log.take(), "nothing is written yet")
		f.flush()
		got := f.signals(&log)
		require.ElementsMatch(t, []swarm.CheatSignalKind{swarm.SignalNoLeecher, swarm.SignalUploadRate}, kinds(got))
		for _, s := range got {
			require.Equal(t, "alice", s.UserID)
			require.Equal(t, int64(10_000), s.Uploaded)
		}
		ledger := f.onTorrent(hash, "alice").Ledger
		require.Len(t, ledger, 1)
		require.Equal(t, 100*time.Millisecond, ledger[0].Elapsed)
	})
}

// Bad watch settings are refused with the field named.
func TestWatchSettingsRefused(t *testing.T) {
	for _, w := range []swarm.WatchConfig{
		{LedgerEntries: -1}, {LedgerEntries: swarm.MaxLedgerEntries + 1}, {SignalPeriod: -time.Second},
		{MaxUploadRate: -1}, {DownloadFactor: -1}, {DownloadFactor: 0.5}, {MaxAddresses: -2}, {AddressWindow: -time.Minute},
	} {
		_, err := swarm.Config{Watch: w}.WithDefaults()
		require.ErrorContains(t, err, "Watch.", "%+v", w)
	}
}

// A size outside 1 to 2^53 bytes is refused and changes nothing.
func TestRegistrationSize(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1", Size: 4096}))
		require.Equal(t, int64(4096), f.torrent(hash).Size)
		require.ErrorIs(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1", Size: -1}), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1", Size: 1<<53 + 1}), swarm.ErrInvalid)
		require.NoError(t, f.store.Register(ctx, hash, swarm.Registration{ID: "t1"}))
		require.Equal(t, int64(4096), f.torrent(hash).Size, "0 keeps the stored size")
	})
}

// A frontend killed before its flush (here: one whose batch is never
// flushed) loses its signals, never credit nor a ledger entry: the script
// credits the record from the cumulative counters and writes the ledger
// entry with the credit, so another frontend's announces carry on from
// there, and the ledger stays within its bound.
func TestAbandonedFlushCostsNoCreditNorLedgerAndTheLedgerStaysBounded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var logA, logB cheatLog
		cfgA := allSignals(&logA)
		cfgA.Watch.MaxUploadRate = 1 // every upload fires, once per period
		cfgA.Watch.NoLeecher = false
		a, hash := privateFixture(t, b, cfgA)
		ctx := context.Background()
		require.NoError(t, a.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditDoubleUpload}))
		me := peerID("-TR", 1)
		a.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		for i := 1; i <= 4; i++ {
			a.clock.Advance(time.Minute)
			a.announce(hash, me, 1, passkey("passkeyA"), transfer(uint64(100*i), uint64(1000*i)))
		}
		// a is killed now: its batch (the signal) is lost.

		cfgB := allSignals(&logB)
		cfgB.Watch.MaxUploadRate, cfgB.Watch.NoLeecher = 1, false
		cfgB.Private = true
		bf := newFixture(t, b, cfgB)
		bf.clock.Advance(5 * time.Minute)
		bf.announce(hash, me, 1, passkey("passkeyA"), transfer(500, 5000))
		bf.flush()
		rec := bf.onTorrent(hash, "alice")
		require.Equal(t, int64(500), rec.Uploaded, "every byte credited, the lost frontend's too")
		require.Equal(t, int64(5000), rec.Downloaded)
		require.Equal(t, int64(1000), rec.UpCredited, "double upload, from the counters")
		require.Len(t, rec.Ledger, 3, "the killed frontend's entries are the script's: kept, to the bound")
		for j, e := range rec.Ledger {
			require.Equal(t, int64(100), e.Uploaded, "entry %d", j)
			require.Equal(t, int64(200), e.UpCredited, "entry %d", j)
		}
		require.Equal(t, epoch.Add(5*time.Minute), rec.Ledger[0].At, "the surviving frontend's, newest")
		require.Equal(t, epoch.Add(4*time.Minute), rec.Ledger[1].At, "the killed frontend's")
		require.Empty(t, logA.take(), "the lost frontend's signal is lost")
		require.Equal(t, []swarm.CheatSignalKind{swarm.SignalUploadRate}, kinds(logB.take()))

		for i := 6; i <= 20; i++ {
			bf.clock.Advance(time.Minute)
			bf.announce(hash, me, 1, passkey("passkeyA"), transfer(uint64(100*i), uint64(1000*i)))
			if i%4 == 0 {
				bf.flush()
			}
		}
		bf.flush()
		rec = bf.onTorrent(hash, "alice")
		require.Equal(t, int64(2000), rec.Uploaded)
		require.Equal(t, int64(4000), rec.UpCredited)
		require.Len(t, rec.Ledger, 3, "the bound")
		for j, e := range rec.Ledger {
			require.Equal(t, int64(100), e.Uploaded, "entry %d", j)
		}
		require.Equal(t, epoch.Add(20*time.Minute), rec.Ledger[0].At)
		fields, err := b.Client.HKeys(ctx, btstore.UserTorrentKey(hash, "alice")).Result()
		require.NoError(t, err)
		entries := 0
		for _, name := range fields {
			if len(name) > 1 && name[0] == 'l' && name[1] >= '0' && name[1] <= '9' {
				entries++
			}
		}
		require.Equal(t, 3, entries, "no more entry fields than the bound")
	})
}
