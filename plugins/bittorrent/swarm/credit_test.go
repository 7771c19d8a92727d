package swarm_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// onTorrent reads alice's record on a torrent.
func (f *fixture) onTorrent(hash bittorrent.InfoHash, user string) swarm.UserTorrent {
	f.t.Helper()
	u, err := f.store.UserOnTorrent(context.Background(), hash, user)
	require.NoError(f.t, err)
	return u
}

// A transfer of 4000 up and 8000 down in two announces, credited under
// each torrent status: the credited figures follow the status, the raw
// ones never move, and the user's totals sum the credited ones.
func TestCreditedTransferUnderEachTorrentStatus(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		cases := []struct {
			credit   swarm.Credit
			up, down int64
		}{
			{swarm.Credit{Kind: swarm.CreditNormal}, 4000, 8000},
			{swarm.Credit{Kind: swarm.CreditFreeleech}, 4000, 0},
			{swarm.Credit{Kind: swarm.CreditNeutral}, 0, 0},
			{swarm.Credit{Kind: swarm.CreditDoubleUpload}, 8000, 8000},
			{swarm.Credit{Kind: swarm.CreditPercentOff, PercentOff: 25}, 4000, 6000},
		}
		f, _ := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		var wantUp, wantDown int64
		for i, c := range cases {
			hash := infoHash(string(c.credit.Kind))
			require.NoError(t, f.store.RegisterTorrent(ctx, hash, "c"+string(rune('a'+i))))
			require.NoError(t, f.store.SetTorrentCredit(ctx, hash, c.credit))
			require.Equal(t, c.credit, f.torrent(hash).Credit)
			me := peerID("-TR", i)
			f.announce(hash, me, i, passkey("passkeyA"), event(bittorrent.EventStarted))
			f.announce(hash, me, i, passkey("passkeyA"), transfer(1000, 3000))
			f.announce(hash, me, i, passkey("passkeyA"), transfer(4000, 8000), seeding, event(bittorrent.EventCompleted))
			got := f.onTorrent(hash, "alice")
			require.Equal(t, int64(4000), got.Uploaded, c.credit.Kind)
			require.Equal(t, int64(8000), got.Downloaded, c.credit.Kind)
			require.Equal(t, c.up, got.UpCredited, c.credit.Kind)
			require.Equal(t, c.down, got.DownCredited, c.credit.Kind)
			wantUp += c.up
			wantDown += c.down
		}
		sum := f.user("alice")
		require.Equal(t, int64(5*4000), sum.Uploaded)
		require.Equal(t, wantUp, sum.UpCredited)
		require.Equal(t, wantDown, sum.DownCredited)
	})
}

// A user's record stores its figures exactly past 2^53 either side of 0:
// a client may report counters up to 2^64, and on a freeleech torrent
// down_extra (credited less raw) falls as far below 0. prelude's whole
// passes a figure within 2^53 to HSET as a Lua number and text beyond it;
// a number there would reach Redis as %.17g, rounded or in exponent form.
func TestUserRecordFiguresPast2To53(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditFreeleech}))
		me := peerID("-TR", 1)
		const huge = int64(1) << 60
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(7, uint64(huge)))
		rec := f.hash(btstore.UserTorrentKey(hash, "alice"))
		require.Equal(t, strconv.FormatInt(huge, 10), rec["downloaded"])
		require.Equal(t, strconv.FormatInt(-huge, 10), rec["down_extra"])
		require.Equal(t, "7", rec["uploaded"])
		got := f.onTorrent(hash, "alice")
		require.Equal(t, huge, got.Downloaded)
		require.Equal(t, int64(0), got.DownCredited)
		require.Equal(t, int64(7), got.UpCredited)
	})
}

// A client restart (counters back to zero, no started event) and a
// started event each open a session: nothing is negative or doubled,
// and the transfer after them is credited once.
func TestCreditAcrossClientRestart(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditDoubleUpload}))
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(500, 700))
		// restarted: its counters start again
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(100, 200))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(300, 900))
		// a started event reporting counters already run up opens a session at them
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(5000, 5000), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(5010, 5020))
		got := f.onTorrent(hash, "alice")
		require.Equal(t, int64(500+200+10), got.Uploaded)
		require.Equal(t, int64(700+700+20), got.Downloaded)
		require.Equal(t, 2*got.Uploaded, got.UpCredited)
		require.Equal(t, got.Downloaded, got.DownCredited)
	})
}

// A site-wide freeleech window that opens in the middle of a download
// credits the download before it and not the one after; when it closes
// download counts again. A window set on another frontend reaches this
// one through the hint (or within CacheTTL).
func TestCreditWindowStartingMidDownload(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		start := epoch.Add(10 * time.Minute)
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		require.NoError(t, f.store.SetCreditWindow(ctx, swarm.CreditWindow{ID: "weekend",
			Credit: swarm.Credit{Kind: swarm.CreditFreeleech}, Start: start, End: start.Add(time.Hour)}))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(0, 1000))
		f.clock.Advance(10 * time.Minute) // the window opens
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(0, 3000))
		require.Equal(t, int64(1000), f.onTorrent(hash, "alice").DownCredited)
		f.clock.Advance(time.Hour) // it closes
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(0, 3500))
		got := f.onTorrent(hash, "alice")
		require.Equal(t, int64(3500), got.Downloaded)
		require.Equal(t, int64(1500), got.DownCredited)

		windows, err := f.store.CreditWindows(ctx)
		require.NoError(t, err)
		require.Len(t, windows, 1)
		require.Equal(t, "weekend", windows[0].ID)
		require.True(t, windows[0].Start.Equal(start))

		// Bad windows change nothing.
		for _, w := range []swarm.CreditWindow{
			{ID: "x", Credit: swarm.Credit{Kind: swarm.CreditFreeleech}, Start: start, End: start},
			{ID: "x", Credit: swarm.Credit{Kind: "gold"}, Start: start, End: start.Add(time.Hour)},
			{ID: "x", Credit: swarm.Credit{Kind: swarm.CreditNormal}, Start: start, End: start.Add(time.Hour)},
			{ID: "x{y}", Credit: swarm.Credit{Kind: swarm.CreditFreeleech}, Start: start, End: start.Add(time.Hour)},
		} {
			require.ErrorIs(t, f.store.SetCreditWindow(ctx, w), swarm.ErrInvalid)
		}
		require.NoError(t, f.store.RemoveCreditWindow(ctx, "weekend"))
		require.ErrorIs(t, f.store.RemoveCreditWindow(ctx, "weekend"), swarm.ErrNotFound)
		windows, err = f.store.CreditWindows(ctx)
		require.NoError(t, err)
		require.Empty(t, windows)
	})
}

// Windows and the torrent's status combine: the most generous download
// rate and upload rate win, and neutral credits nothing.
func TestCreditCombinesTorrentAndWindows(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{})
		ctx := context.Background()
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditPercentOff, PercentOff: 50}))
		require.NoError(t, f.store.SetCreditWindow(ctx, swarm.CreditWindow{ID: "du",
			Credit: swarm.Credit{Kind: swarm.CreditDoubleUpload}, Start: epoch, End: epoch.Add(time.Hour)}))
		require.NoError(t, f.store.SetCreditWindow(ctx, swarm.CreditWindow{ID: "p25",
			Credit: swarm.Credit{Kind: swarm.CreditPercentOff, PercentOff: 25}, Start: epoch, End: epoch.Add(time.Hour)}))
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 1000))
		got := f.onTorrent(hash, "alice")
		require.Equal(t, int64(2000), got.UpCredited, "double upload from the window")
		require.Equal(t, int64(500), got.DownCredited, "the torrent's 50% off beats the window's 25%")

		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditNeutral}))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(2000, 2000))
		got = f.onTorrent(hash, "alice")
		require.Equal(t, int64(2000), got.UpCredited, "neutral: nothing more")
		require.Equal(t, int64(500), got.DownCredited)

		// Bad statuses change nothing; an unregistered torrent has none.
		for _, c := range []swarm.Credit{{Kind: "gold"}, {Kind: swarm.CreditPercentOff}, {Kind: swarm.CreditPercentOff, PercentOff: 100},
			{Kind: swarm.CreditFreeleech, PercentOff: 10}} {
			require.ErrorIs(t, f.store.SetTorrentCredit(ctx, hash, c), swarm.ErrInvalid)
		}
		require.Equal(t, swarm.Credit{Kind: swarm.CreditNeutral}, f.torrent(hash).Credit)
		require.ErrorIs(t, f.store.SetTorrentCredit(ctx, infoHash("nope"), swarm.Credit{Kind: swarm.CreditFreeleech}), swarm.ErrNotFound)
		_, err := f.store.Torrent(ctx, infoHash("nope"))
		require.ErrorIs(t, err, swarm.ErrNotFound, "a refused status writes no record")
	})
}

// tokenLog collects the token events a store reports.
type tokenLog = eventLog[swarm.TokenEvent]

func tokenKinds(events []swarm.TokenEvent) []swarm.TokenEventKind {
	var kinds []swarm.TokenEventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// A personal token makes one user's download on one torrent free until
// it ends; its first use and its end are reported once each, and only
// for the user who holds it.
func TestPersonalToken(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var log tokenLog
		f, hash := privateFixture(t, b, swarm.Config{OnToken: log.add})
		ctx := context.Background()
		until := epoch.Add(time.Hour)
		require.NoError(t, f.store.GrantToken(ctx, hash, "alice", until))
		got := f.onTorrent(hash, "alice")
		require.True(t, got.Token)
		require.True(t, got.TokenUntil.Equal(until))

		alice, bob := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, alice, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, bob, 2, passkey("passkeyB"), event(bittorrent.EventStarted))
		f.announce(hash, alice, 1, passkey("passkeyA"), transfer(0, 0))
		require.Empty(t, tokenKinds(log.all()), "a token is used by a download, not by an announce")
		f.announce(hash, alice, 1, passkey("passkeyA"), transfer(100, 1000))
		f.announce(hash, bob, 2, passkey("passkeyB"), transfer(100, 1000))
		f.announce(hash, alice, 1, passkey("passkeyA"), transfer(200, 2000))
		require.Equal(t, []swarm.TokenEventKind{swarm.TokenUsed}, tokenKinds(log.all()))
		f.clock.Advance(time.Hour) // it ends
		f.announce(hash, alice, 1, passkey("passkeyA"), transfer(300, 3000))
		f.announce(hash, alice, 1, passkey("passkeyA"), transfer(400, 4000))
		require.Equal(t, []swarm.TokenEventKind{swarm.TokenUsed, swarm.TokenEnded}, tokenKinds(log.all()))
		require.Equal(t, "alice", log.all()[1].UserID)
		require.Equal(t, "t1", log.all()[1].TorrentID)
		require.True(t, log.all()[0].Used.Equal(log.all()[1].Used), "both events name the grant by its first use")

		got = f.onTorrent(hash, "alice")
		require.Equal(t, int64(2000), got.DownCredited, "free until the end, then counted")
		require.Equal(t, int64(400), got.UpCredited)
		require.False(t, got.TokenEnded.IsZero())
		require.Equal(t, int64(1000), f.onTorrent(hash, "bob").DownCredited, "bob has no token")

		// Revoking, and bad grants, change nothing else.
		require.NoError(t, f.store.RevokeToken(ctx, hash, "alice"))
		require.ErrorIs(t, f.store.RevokeToken(ctx, hash, "alice"), swarm.ErrNotFound)
		require.ErrorIs(t, f.store.GrantToken(ctx, hash, "alice", f.clock.Now().Add(-time.Minute)), swarm.ErrInvalid)
		require.ErrorIs(t, f.store.GrantToken(ctx, infoHash("nope"), "alice", time.Time{}), swarm.ErrNotFound)
		require.ErrorIs(t, f.store.GrantToken(ctx, hash, "a{b}", time.Time{}), swarm.ErrInvalid)
		require.False(t, f.onTorrent(hash, "alice").Token)
	})
}

// With accounting off, the raw transfer is kept and nothing is credited.
func TestNoAccounting(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{NoAccounting: true})
		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 2000))
		got := f.onTorrent(hash, "alice")
		require.Equal(t, int64(1000), got.Uploaded)
		require.Zero(t, got.UpCredited)
		require.Zero(t, got.DownCredited)
		// The totals keep the raw figures and no difference: with
		// accounting off a flush writes no credited field at all.
		f.flush()
		totals := b.Client.HGetAll(context.Background(), btstore.UserStatsKey("alice")).Val()
		require.Equal(t, "1000", totals["uploaded"])
		require.Equal(t, "2000", totals["downloaded"])
		require.NotContains(t, totals, "up_extra")
		require.NotContains(t, totals, "down_extra")
	})
}

// Plain re-announces answered from the view and written behind
// (refresh.lua) are credited like announce.lua's: at the multipliers in
// force when each was answered (a window that opens while one waits in
// the queue does not reach it), with a token's first use reported and the
// record numbered for the feed.
func TestWrittenBehindReannouncesAreCredited(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var mu sync.Mutex
		var tokens []swarm.TokenEvent
		f, hash := privateFixture(t, b, swarm.Config{OnToken: func(_ context.Context, e swarm.TokenEvent) {
			mu.Lock()
			defer mu.Unlock()
			tokens = append(tokens, e)
		}})
		ctx := context.Background()
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditDoubleUpload}))
		me, other := peerID("-TR", 1), peerID("-TR", 2)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding, event(bittorrent.EventStarted))
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, other, 2, passkey("passkeyB"), seeding) // reads the view: in full
		answered := f.store.WriteBehindStats().Answered

		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 2000))
		require.Equal(t, answered+1, f.store.WriteBehindStats().Answered, "written behind")
		f.flush()
		got := f.onTorrent(hash, "alice")
		require.Equal(t, int64(1000), got.Uploaded)
		require.Equal(t, int64(2000), got.UpCredited, "double upload")
		require.Equal(t, int64(2000), got.DownCredited)
		seq := got.Seq

		// A token makes the next download free; its first use is reported.
		require.NoError(t, f.store.GrantToken(ctx, hash, "alice", time.Time{}))
		f.clock.Advance(100 * time.Millisecond)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1500, 5000))
		require.Equal(t, answered+2, f.store.WriteBehindStats().Answered, "written behind")
		// a freeleech window opening while it waits does not reach it
		require.NoError(t, f.store.SetCreditWindow(ctx, swarm.CreditWindow{ID: "w", Credit: swarm.Credit{Kind: swarm.CreditNeutral},
			Start: f.clock.Now(), End: f.clock.Now().Add(time.Hour)}))
		f.flush()
		got = f.onTorrent(hash, "alice")
		require.Equal(t, int64(3000), got.UpCredited)
		require.Equal(t, int64(2000), got.DownCredited, "the token's download is free")
		require.Greater(t, got.Seq, seq, "numbered for the feed")
		mu.Lock()
		require.Len(t, tokens, 1)
		require.Equal(t, swarm.TokenUsed, tokens[0].Kind)
		require.Equal(t, "alice", tokens[0].UserID)
		mu.Unlock()
		user := f.user("alice")
		require.Equal(t, int64(3000), user.UpCredited)
		require.Equal(t, int64(2000), user.DownCredited)
	})
}

// Issue 28's bound: accounting sends no plain re-announce through
// announce.lua that the write-behind would answer without it (the
// credited transfer rides the written-behind refresh, from the cumulative
// counters). The same announces at the same times are answered from the
// view as often with accounting on as off, and the credit is all there.
func TestAccountingWritesBehindWhatNoAccountingDoes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		answered := map[bool]int64{}
		for _, off := range []bool{false, true} {
			f, hash := privateFixture(t, b, swarm.Config{NoAccounting: off})
			keys := []string{"passkeyA", "passkeyB"}
			for i := range 10 {
				f.announce(hash, peerID("-TR", i), i, passkey(keys[i%2]), event(bittorrent.EventStarted), transfer(0, 0))
			}
			for step := 1; step <= 200; step++ {
				f.clock.Advance(97 * time.Millisecond) // ten peers each every ~1 s: a hot torrent
				i := step * 7 % 10
				f.announce(hash, peerID("-TR", i), i, passkey(keys[i%2]), transfer(uint64(step*1000), uint64(step*500)))
				if step%20 == 0 {
					f.flush()
				}
			}
			f.flush()
			answered[off] = f.store.WriteBehindStats().Answered
			alice := f.user("alice")
			if off {
				require.Zero(t, alice.UpCredited)
			} else {
				require.Positive(t, alice.UpCredited)
				require.Equal(t, alice.Uploaded, alice.UpCredited, "no multiplier: credited is raw, written behind or not")
			}
			require.NoError(t, redistest.Flush(context.Background(), b))
		}
		require.Greater(t, answered[false], int64(100), "most re-announces of a hot torrent are written behind")
		require.Equal(t, answered[true], answered[false], "accounting on answers from the view as often as off")
	})
}

// Every group of the credit reply's mask reaches the frontend as the
// scripts meant it: under a double-upload window and 50% off, with a
// snatch, the feed's rows (announce.lua's reply, then the write-behind
// refresh.lua's) carry the record's credited figures and snatch time,
// and the user's totals the credited transfer.
func TestCreditReplyGroupsReachTheFeed(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var rows []swarm.FeedRow
		deliver := func(_ context.Context, batches []swarm.FeedBatch) error {
			for _, batch := range batches {
				rows = append(rows, batch.Rows...)
			}
			return nil
		}
		f, hash := privateFixture(t, b, swarm.Config{OnFeed: deliver})
		ctx := context.Background()
		require.NoError(t, f.store.SetCreditWindow(ctx, swarm.CreditWindow{ID: "du",
			Credit: swarm.Credit{Kind: swarm.CreditDoubleUpload}, Start: epoch, End: epoch.Add(time.Hour)}))
		require.NoError(t, f.store.SetTorrentCredit(ctx, hash, swarm.Credit{Kind: swarm.CreditPercentOff, PercentOff: 50}))
		newest := func() swarm.FeedRow {
			t.Helper()
			rows = rows[:0]
			_, err := f.store.FeedRound(ctx, deliver)
			require.NoError(t, err)
			require.NotEmpty(t, rows)
			last := rows[len(rows)-1]
			for _, r := range rows {
				if r.Seq > last.Seq {
					last = r
				}
			}
			return last
		}

		me := peerID("-TR", 1)
		f.announce(hash, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.clock.Advance(time.Minute)
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1000, 4000))
		f.clock.Advance(time.Minute)
		snatchedAt := f.clock.Now().UnixMilli()
		f.announce(hash, me, 1, passkey("passkeyA"), transfer(1500, 6000), event(bittorrent.EventCompleted), seeding)
		f.flush()
		row := newest()
		require.Equal(t, swarm.FeedRow{UserID: "alice", Seq: row.Seq, Uploaded: 1500, Downloaded: 6000,
			UpCredited: 3000, DownCredited: 3000, SeedMillis: 0, LeechMillis: 2 * time.Minute.Milliseconds(),
			Snatched: snatchedAt}, row, "announce.lua's row: credited extras and the snatch")

		// Plain re-announces, which the write-behind may answer with
		// refresh.lua: the row keeps the record's extras and snatch.
		for i := range 3 {
			f.clock.Advance(time.Minute)
			f.announce(hash, me, 1, passkey("passkeyA"), transfer(uint64(2000+1000*i), 6000), seeding)
		}
		f.flush()
		row = newest()
		got := f.onTorrent(hash, "alice")
		require.Equal(t, swarm.FeedRow{UserID: "alice", Seq: got.Seq, Uploaded: 4000, Downloaded: 6000,
			UpCredited: 8000, DownCredited: 3000, SeedMillis: 3 * time.Minute.Milliseconds(),
			LeechMillis: 2 * time.Minute.Milliseconds(), Snatched: snatchedAt}, row)
		require.Equal(t, got.UpCredited, row.UpCredited)
		require.Equal(t, got.DownCredited, row.DownCredited)
	})
}
