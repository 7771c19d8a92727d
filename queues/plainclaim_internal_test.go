package queues

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

// plainBundle is two frontends (engines) on one Redis, sharing a clock.
type plainBundle struct {
	ctx    context.Context
	rdb    redis.UniversalClient
	clock  *FakeClock
	a, b   *Engine
	slug   string
	node   redis.Cmdable // the node of the project's slot
	script func() (claim, claimPlain, done, donePlain bool)
}

func newPlainBundle(t *testing.T, b redistest.Backend, slug string) plainBundle {
	t.Helper()
	ctx := context.Background()
	clock := NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pb := plainBundle{ctx: ctx, rdb: b.Client, clock: clock, slug: slug,
		a: NewEngine(b.Client, Options{Clock: clock, Logger: quiet}),
		b: NewEngine(b.Client, Options{Clock: clock, Logger: quiet})}
	_, err := pb.a.CreateProject(ctx, slug, SettingsPatch{})
	require.NoError(t, err)
	// Which scripts ran since the last flush: a script's function is
	// loaded once a call found it missing (FCALL's "Function not found"
	// loads it), on the node of the project's slot among others.
	pb.node = b.Client
	if cluster, ok := b.Client.(*redis.ClusterClient); ok {
		node, err := cluster.MasterForKey(ctx, ConfigKey(slug))
		require.NoError(t, err)
		pb.node = node
	}
	pb.script = func() (bool, bool, bool, bool) {
		have := func(s *luascript.Script) bool {
			libs, err := pb.node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: s.Name()}).Result()
			require.NoError(t, err)
			return len(libs) == 1
		}
		// done_plain.lua runs alone or after done_plain_whole.lua's step
		// (a done of claimBatchMin or more items).
		return have(claimScript), have(claimPlainScript), have(doneScript), have(donePlainScript) || have(donePlainWholeScript)
	}
	return pb
}

func (pb plainBundle) enqueue(t *testing.T, e *Engine, names ...string) {
	t.Helper()
	items := make([]QueueItem, len(names))
	for i, n := range names {
		items[i] = QueueItem{Name: n}
	}
	_, err := e.Enqueue(pb.ctx, pb.slug, Target{Queue: QueueTodo}, items)
	require.NoError(t, err)
}

func (pb plainBundle) claim(e *Engine, downloader string, n int) ([]string, error) {
	res, err := e.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: downloader, IP: "10.0.0.1", Count: n})
	names := make([]string, len(res.Items))
	for i, it := range res.Items {
		names[i] = it.Name
	}
	return names, err
}

func (pb plainBundle) flushScripts(t *testing.T) {
	t.Helper()
	require.NoError(t, pb.node.FunctionFlush(pb.ctx).Err())
}

// TestPlainProjectIsServedByThePlainScripts: a new project's claims and
// dones run claim_plain.lua and done_plain.lua only, and their records,
// deadlines and counters are the general scripts'.
func TestPlainProjectIsServedByThePlainScripts(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "plain")
		pb.enqueue(t, pb.a, "a", "b", "c", "d")
		pb.flushScripts(t)
		got, err := pb.claim(pb.a, "alice", 3)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, got)
		now := pb.clock.Now().UnixMilli()
		record, err := pb.rdb.HGet(pb.ctx, ClaimsKey(pb.slug), "b").Result()
		require.NoError(t, err)
		c, ok := parseClaimRecord("b", record)
		require.True(t, ok, record)
		require.Equal(t, Claim{Item: "b", TimesClaimed: 1, ClaimedAt: time.UnixMilli(now).UTC(), Downloader: "alice", IP: "10.0.0.1"}, c)
		deadline, err := pb.rdb.ZScore(pb.ctx, DeadlinesKey(pb.slug), "b").Result()
		require.NoError(t, err)
		require.EqualValues(t, now+DefaultReclaimTTL.Milliseconds(), deadline)
		queued, err := pb.rdb.SMembers(pb.ctx, QueuedKey(pb.slug)).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"d"}, queued)

		pb.clock.Advance(1500 * time.Millisecond)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"a", "b"}, Bytes: map[string]int64{"data": 10}})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 2}, res)
		claim, claimPlain, done, donePlain := pb.script()
		require.False(t, claim, "claim.lua did not run")
		require.True(t, claimPlain, "claim_plain.lua ran")
		require.False(t, done, "done.lua did not run")
		require.True(t, donePlain, "done_plain.lua ran")

		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 3, stats.Counters["items_served"])
		require.EqualValues(t, 1, stats.Counters["requests_served"])
		require.EqualValues(t, 2, stats.Counters["items_done"])
		counts, err := pb.a.Counts(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, counts.Out)
		require.EqualValues(t, 2, counts.Done)
		require.EqualValues(t, 1, counts.Todo)
	})
}

// TestAnotherFrontendsChangeIsSeenAtOnce: frontend a has a copy of the
// settings (it claimed); frontend b changes what makes a claim plain; a's
// next claim obeys the change at once, with the clock standing still (so
// no refresh by age): config_version moved, or the script read the flag.
func TestAnotherFrontendsChangeIsSeenAtOnce(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, pb plainBundle)
		check  func(t *testing.T, pb plainBundle, got []string, err error)
	}{
		{"paused", func(t *testing.T, pb plainBundle) {
			_, err := pb.b.UpdateProject(pb.ctx, pb.slug, SettingsPatch{Paused: ptrTo(true)})
			require.NoError(t, err)
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.Error(t, err)
			require.Contains(t, err.Error(), "paused")
		}},
		{"blocked in the project", func(t *testing.T, pb plainBundle) {
			require.NoError(t, pb.b.Block(pb.ctx, pb.slug, "alice", BlockEntry{Reason: "testing"}))
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.Equal(t, CodeBlocked, CodeOf(err), "%v", err)
		}},
		{"a reserved queue", func(t *testing.T, pb plainBundle) {
			_, err := pb.b.Enqueue(pb.ctx, pb.slug, Target{Downloader: "alice"}, []QueueItem{{Name: "mine"}})
			require.NoError(t, err)
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.NoError(t, err)
			require.Equal(t, []string{"mine"}, got, "the reserved queue first")
		}},
		{"extras", func(t *testing.T, pb plainBundle) {
			// As the build before writes them: has_extras without
			// config_version (claim_plain.lua reads the flag itself).
			require.NoError(t, pb.rdb.HSet(pb.ctx, ExtrasKey(pb.slug), "i2", `{"k":1}`).Err())
			require.NoError(t, pb.rdb.HSet(pb.ctx, ConfigKey(pb.slug), "has_extras", "1").Err())
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.NoError(t, err)
			require.Equal(t, []string{"i2"}, got)
		}},
		{"a minimum version", func(t *testing.T, pb plainBundle) {
			_, err := pb.b.UpdateProject(pb.ctx, pb.slug, SettingsPatch{MinVersion: ptrTo("20300101.01")})
			require.NoError(t, err)
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.Equal(t, CodeVersionTooOld, CodeOf(err), "%v", err)
		}},
		{"a claims limit", func(t *testing.T, pb plainBundle) {
			_, err := pb.b.UpdateProject(pb.ctx, pb.slug, SettingsPatch{ClaimsLimit: ptrTo(1)})
			require.NoError(t, err)
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.Equal(t, CodeNoItem, CodeOf(err), "one claim is out already: %v", err)
		}},
		{"a released item", func(t *testing.T, pb plainBundle) {
			res, err := pb.b.ReleaseClaims(pb.ctx, pb.slug, ReleaseFilter{})
			require.NoError(t, err)
			require.Equal(t, 1, res.Released)
			// Moved to todo by an operator: its claim count goes on.
			_, err = pb.b.Move(pb.ctx, pb.slug, MoveRequest{From: QueueRedo, To: QueueTodo})
			require.NoError(t, err)
		}, func(t *testing.T, pb plainBundle, got []string, err error) {
			require.NoError(t, err)
			got, err = pb.claim(pb.a, "alice", 2)
			require.NoError(t, err)
			require.Equal(t, []string{"i3", "i1"}, got)
			record, rerr := pb.rdb.HGet(pb.ctx, ClaimsKey(pb.slug), "i1").Result()
			require.NoError(t, rerr)
			c, ok := parseClaimRecord("i1", record)
			require.True(t, ok)
			require.Equal(t, 2, c.TimesClaimed, "the released item's second claim")
		}},
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for i, c := range cases {
			pb := newPlainBundle(t, b, "seen-"+string(rune('a'+i)))
			pb.enqueue(t, pb.a, "i1", "i2", "i3")
			got, err := pb.claim(pb.a, "alice", 1)
			require.NoError(t, err, c.name)
			require.Equal(t, []string{"i1"}, got, c.name)
			c.change(t, pb)
			got, err = pb.claim(pb.a, "alice", 1)
			c.check(t, pb, got, err)
		}
	})
}

// TestConfigOfTheBuildBeforeIsRead: a project written by the build before
// has no config_version; its claims are plain all the same, and the first
// settings change by this build is seen.
func TestConfigOfTheBuildBeforeIsRead(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "before")
		require.NoError(t, pb.rdb.HDel(pb.ctx, ConfigKey(pb.slug), "config_version").Err())
		pb.enqueue(t, pb.a, "a", "b")
		pb.flushScripts(t)
		got, err := pb.claim(pb.a, "alice", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, got)
		claim, claimPlain, _, _ := pb.script()
		require.False(t, claim)
		require.True(t, claimPlain)
		_, err = pb.b.UpdateProject(pb.ctx, pb.slug, SettingsPatch{Paused: ptrTo(true)})
		require.NoError(t, err)
		_, err = pb.claim(pb.a, "alice", 1)
		require.Error(t, err)
		require.Contains(t, err.Error(), "paused")
	})
}

// TestPlainClaimOfMoreThanTodoHoldsChangesNothingAndClaimLuaServes: todo
// holds fewer than wanted, so claim_plain.lua puts its pop back and
// claim.lua serves todo and backfeed, in order.
func TestPlainClaimOfMoreThanTodoHoldsChangesNothingAndClaimLuaServes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "short")
		pb.enqueue(t, pb.a, "t1", "t2")
		_, err := pb.a.Enqueue(pb.ctx, pb.slug, Target{Queue: QueueBackfeed}, []QueueItem{{Name: "b1"}, {Name: "b2"}})
		require.NoError(t, err)
		pb.flushScripts(t)
		got, err := pb.claim(pb.a, "alice", 3)
		require.NoError(t, err)
		require.Equal(t, []string{"t1", "t2", "b1"}, got)
		claim, claimPlain, _, _ := pb.script()
		require.True(t, claim)
		require.True(t, claimPlain)
	})
}

// TestProjectCreatedAgainIsNotServedFromTheCopyBefore: a project deleted
// and created again under its slug (settings paused this time) is not
// served from a frontend's copy of the one before.
func TestProjectCreatedAgainIsNotServedFromTheCopyBefore(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "again")
		pb.enqueue(t, pb.a, "a")
		got, err := pb.claim(pb.a, "alice", 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, got)
		_, err = pb.b.DeleteProject(pb.ctx, pb.slug, true)
		require.NoError(t, err)
		_, err = pb.b.CreateProject(pb.ctx, pb.slug, SettingsPatch{Paused: ptrTo(true)})
		require.NoError(t, err)
		pb.enqueue(t, pb.b, "b")
		_, err = pb.claim(pb.a, "alice", 1)
		require.Error(t, err)
		require.Contains(t, err.Error(), "paused")
	})
}

// TestVersionGateInGoIsClaimLuas: where versionServed is sure, it says
// what claim.lua says (asked on a project with a claims limit, which only
// claim.lua serves); where claim.lua refuses, the plain path never serves.
func TestVersionGateInGoIsClaimLuas(t *testing.T) {
	minimums := []string{"20240101.10", "1.0.beta", "2.0", "v3-rc1", "0010.2", "1.0a", "abc"}
	versions := []string{"", "20240101.9", "20240101.09", "20240101.10", "20240101.010", "20240101.10.1",
		"20240102", "120240101", "1.0", "1.0.1", "1.0.beta", "1.0.alpha", "1.0.gamma", "2", "2.0.0", "1.99",
		"v3-rc1", "v3-rc2", "v3", "v4", "V3-RC1", "10.2", "0010.02", "1.0a", "1.0b", "1.0A", "abc", "abd", "ABC", "zz", "...", "9"}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "versions")
		items := make([]string, len(minimums)*len(versions))
		for i := range items {
			items[i] = "v" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		}
		pb.enqueue(t, pb.a, items...)
		sure := 0
		for _, minimum := range minimums {
			_, err := pb.a.UpdateProject(pb.ctx, pb.slug, SettingsPatch{MinVersion: ptrTo(minimum), ClaimsLimit: ptrTo(1_000_000)})
			require.NoError(t, err)
			for _, version := range versions {
				_, err := pb.a.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: "alice", Version: version, Count: 1})
				luaServed := err == nil
				if !luaServed {
					require.Equal(t, CodeVersionTooOld, CodeOf(err), "%q under %q: %v", version, minimum, err)
				}
				served, ok := versionServed(version, minimum)
				if ok {
					sure++
					require.Equal(t, luaServed, served, "%q under %q", version, minimum)
				}
			}
		}
		require.Greater(t, sure, len(minimums)*len(versions)*3/4, "most pairs are decided in Go")
	})
}

// TestPlainClaimKeepsTheVersionGate: a project with a minimum version is
// served plain to clients at or above it, and a client below it is
// refused (by claim.lua).
func TestPlainClaimKeepsTheVersionGate(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "gate")
		_, err := pb.a.UpdateProject(pb.ctx, pb.slug, SettingsPatch{MinVersion: ptrTo("20240101.10")})
		require.NoError(t, err)
		pb.enqueue(t, pb.a, "a", "b")
		pb.flushScripts(t)
		_, err = pb.a.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: "alice", Version: "20240101.11", Count: 1})
		require.NoError(t, err)
		claim, claimPlain, _, _ := pb.script()
		require.False(t, claim)
		require.True(t, claimPlain)
		_, err = pb.a.Claim(pb.ctx, ClaimRequest{Project: pb.slug, Downloader: "alice", Version: "20240101.9", Count: 1})
		require.Equal(t, CodeVersionTooOld, CodeOf(err), "%v", err)
	})
}

// TestPlainDoneSumsEachItemsClaimTime: done_plain.lua reads a record once
// for the run of items that share it (a multi claim's), and still adds
// every item's claim-to-done time: two claims a second apart, reported in
// one done with their items interleaved.
func TestPlainDoneSumsEachItemsClaimTime(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "rtt")
		pb.enqueue(t, pb.a, "a", "b", "c", "d", "e")
		first, err := pb.claim(pb.a, "alice", 3)
		require.NoError(t, err)
		pb.clock.Advance(time.Second)
		second, err := pb.claim(pb.a, "alice", 2)
		require.NoError(t, err)
		pb.clock.Advance(2 * time.Second)
		pb.flushScripts(t)
		items := []string{first[0], first[1], second[0], first[2], second[1]}
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: items})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 5}, res)
		_, _, done, donePlain := pb.script()
		require.False(t, done, "done.lua did not run")
		require.True(t, donePlain, "done_plain.lua ran")
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 5, stats.Counters["rtt_count"])
		require.EqualValues(t, 3*3000+2*2000, stats.Counters["rtt_ms_sum"])
	})
}

// TestPlainDoneOfOneItemAnswersAString: done_plain.lua answers a one-item
// done as "<at> <log_length>", from which the frontend counts the item's
// claim-to-done time and trims the recent-completions log to the
// project's log_length, as from the table it answers for more items.
func TestPlainDoneOfOneItemAnswersAString(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "one")
		_, err := pb.a.UpdateProject(pb.ctx, pb.slug, SettingsPatch{LogLength: ptrTo(2)})
		require.NoError(t, err)
		pb.enqueue(t, pb.a, "a", "b", "c")
		claimed, err := pb.claim(pb.a, "alice", 1)
		require.NoError(t, err)
		pb.clock.Advance(1500 * time.Millisecond)
		pb.flushScripts(t)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: claimed})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 1}, res)
		_, _, done, donePlain := pb.script()
		require.False(t, done, "done.lua did not run")
		require.True(t, donePlain, "done_plain.lua ran")
		reply, err := pb.a.runScript(pb.ctx, "test", donePlainScript, plainKeys(pb.a.warriorKeys.get(pb.slug).donePlain, 1), "alice", claimed[0])
		require.NoError(t, err)
		require.Equal(t, []any{int64(codeNotPlain)}, reply, "a done item is no longer the reporter's claim")
		for range 2 {
			more, err := pb.claim(pb.a, "alice", 1)
			require.NoError(t, err)
			reply, err := pb.a.runScript(pb.ctx, "test", donePlainScript, plainKeys(pb.a.warriorKeys.get(pb.slug).donePlain, 1), "alice", more[0])
			require.NoError(t, err)
			require.Equal(t, strconv.FormatInt(pb.clock.Now().UnixMilli(), 10)+" 2", reply)
		}
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["rtt_count"])
		require.EqualValues(t, 1500, stats.Counters["rtt_ms_sum"])
		for range 3 {
			more := fmt.Sprint("d", pb.clock.Now().UnixNano())
			pb.enqueue(t, pb.a, more)
			_, err := pb.claim(pb.a, "alice", 1)
			require.NoError(t, err)
			_, err = pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{more}})
			require.NoError(t, err)
			pb.clock.Advance(time.Millisecond)
		}
		pb.a.PublishCompletions(pb.ctx)
		require.EqualValues(t, 2, pb.rdb.LLen(pb.ctx, LogKey(pb.slug)).Val(), "the log is trimmed to log_length")
	})
}

// TestClaimOfTheBuildBeforeIsDoneByTheOneItemString: a claim written by
// the build before (its record, deadline and queued index, as its
// claim_plain.lua wrote them, by hand here) still out at the upgrade is
// completed by this build's one-item done: done_plain.lua's string reply,
// the item done once, its claim and deadline gone, its time counted.
func TestClaimOfTheBuildBeforeIsDoneByTheOneItemString(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "upgrade")
		pb.enqueue(t, pb.a, "a", "b")
		claimedAt := pb.clock.Now().UnixMilli()
		require.NoError(t, pb.rdb.LRem(pb.ctx, QueueKey(pb.slug, QueueTodo), 1, "a").Err())
		require.NoError(t, pb.rdb.SRem(pb.ctx, QueuedKey(pb.slug), "a").Err())
		require.NoError(t, pb.rdb.HSet(pb.ctx, ClaimsKey(pb.slug), "a", fmt.Sprintf("1 %d alice 127.0.0.1 - -", claimedAt)).Err())
		require.NoError(t, pb.rdb.ZAdd(pb.ctx, DeadlinesKey(pb.slug), redis.Z{Score: float64(claimedAt + 21_600_000), Member: "a"}).Err())
		pb.clock.Advance(2 * time.Second)
		pb.flushScripts(t)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"a"}})
		require.NoError(t, err)
		require.Equal(t, DoneResult{New: 1}, res)
		_, _, done, donePlain := pb.script()
		require.False(t, done, "done.lua did not run")
		require.True(t, donePlain, "done_plain.lua ran")
		require.NoError(t, pb.a.FlushCounters(pb.ctx))
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, stats.Counters["items_done"])
		require.EqualValues(t, 2000, stats.Counters["rtt_ms_sum"])
		counts, err := pb.a.Counts(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 1, counts.Done)
		require.EqualValues(t, 0, counts.Out)
		require.EqualValues(t, 1, counts.Todo)
		require.Zero(t, pb.rdb.ZCard(pb.ctx, DeadlinesKey(pb.slug)).Val())
		require.Zero(t, pb.rdb.HLen(pb.ctx, ClaimsKey(pb.slug)).Val())
	})
}

// TestDoneNamingAnItemTwiceCountsItOnce: the frontend sends such a list to
// done.lua (done_plain.lua would count the item twice).
func TestDoneNamingAnItemTwiceCountsItOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		pb := newPlainBundle(t, b, "twice")
		pb.enqueue(t, pb.a, "a", "b", "c")
		_, err := pb.claim(pb.a, "alice", 3)
		require.NoError(t, err)
		pb.flushScripts(t)
		res, err := pb.a.Done(pb.ctx, DoneRequest{Project: pb.slug, Downloader: "alice", Items: []string{"a", "b", "a"}})
		require.NoError(t, err)
		require.Equal(t, 2, res.New)
		_, _, done, donePlain := pb.script()
		require.True(t, done, "done.lua ran")
		require.False(t, donePlain, "done_plain.lua did not run")
		stats, err := pb.a.Stats(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 2, stats.Counters["items_done"])
		counts, err := pb.a.Counts(pb.ctx, pb.slug)
		require.NoError(t, err)
		require.EqualValues(t, 2, counts.Done)
		require.EqualValues(t, 1, counts.Out)
	})
}

// TestReplyLogLength: done_plain.lua answers log_length as the config's
// text ("" when unset) and done.lua as a number; both read as done.lua's
// `tonumber(text or '1000') or 1000`.
func TestReplyLogLength(t *testing.T) {
	for _, c := range []struct {
		reply any
		want  int
	}{
		{int64(3), 3}, {"3", 3}, {" 7 ", 7}, {"0", 0}, {"", DefaultLogLength}, {"x", DefaultLogLength}, {nil, DefaultLogLength},
	} {
		require.Equal(t, c.want, replyLogLength(c.reply), "%#v", c.reply)
	}
}

// TestReplyRTTSum: done_plain.lua answers the claim times of each run of
// items sharing a record, done.lua the sum; a claim time ahead of now
// counts 0, as done.lua counts it.
func TestReplyRTTSum(t *testing.T) {
	const now = 10_000
	require.EqualValues(t, 42, replyRTTSum(int64(42), now))
	require.EqualValues(t, 42, replyRTTSum("42", now))
	require.EqualValues(t, 3*1000+2*4000, replyRTTSum([]any{"9000", int64(3), "6000", int64(2)}, now))
	require.EqualValues(t, 1000, replyRTTSum([]any{"12000", int64(5), "9000", int64(1)}, now), "a claim time ahead counts 0")
	require.EqualValues(t, 0, replyRTTSum([]any{"99999999999999999999", int64(1)}, now))
	require.EqualValues(t, 0, replyRTTSum([]any{}, now))
	require.EqualValues(t, 4000, claimToDoneMS("6000", now))
	require.EqualValues(t, 0, claimToDoneMS("12000", now), "a claim time ahead counts 0")
	require.EqualValues(t, 0, claimToDoneMS("99999999999999999999", now))
}

// FuzzLogTailIsTheConcatenation: logTail, built in one buffer, is the
// user agent (cut at 200 bytes) as json.Marshal writes it and the id
// compacted, as the concatenations it replaced built them; an id that is
// not JSON is refused.
func FuzzLogTailIsTheConcatenation(f *testing.F) {
	f.Add("ArchiveTeam Warrior/0.10.3 Standalone", `{"pipeline_hash": "abc", "python_version": "3.9.2"}`)
	f.Add(strings.Repeat("é", 150), "")
	f.Add("<ua>", "[1, 2]")
	f.Add("ua", "{")
	f.Fuzz(func(t *testing.T, ua, id string) {
		got, err := logTail(ua, json.RawMessage(id))
		if id != "" && !json.Valid([]byte(id)) {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		quoted, _ := json.Marshal(truncate(ua, 200))
		want := `"ua":` + string(quoted)
		if id != "" {
			var compact bytes.Buffer
			require.NoError(t, json.Compact(&compact, []byte(id)))
			want += `,"id":` + compact.String()
		}
		require.Equal(t, want, got)
	})
}

// TestSplitClaimedNames: claim_plain.lua's answer for more than one item,
// the names joined by "\n", read back in order; an answer of another
// count than wanted is an error, never a short or merged list.
func TestSplitClaimedNames(t *testing.T) {
	items, err := splitClaimedNames("test", "a\nbb\nc c", 3)
	require.NoError(t, err)
	require.Equal(t, []ClaimedItem{{Name: "a"}, {Name: "bb"}, {Name: "c c"}}, items)
	for _, bad := range []string{"a\nb", "a\nb\nc\nd", "a"} {
		_, err := splitClaimedNames("test", bad, 3)
		require.Error(t, err, bad)
		require.Equal(t, CodeUnavailable, CodeOf(err), bad)
	}
}
