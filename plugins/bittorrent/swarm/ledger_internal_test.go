package swarm

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// TestLedgerWritesGroupByRecordInAnnounceOrder: a flush writes one HSET
// per record, the records in the order they first announced and each
// record's entries in announce order (a later entry in the same slot
// wins), each entry's text as ledgerOf reads it; the entries of failed
// records go back in their order, the others' not.
func TestLedgerWritesGroupByRecordInAnnounceOrder(t *testing.T) {
	a := ledgerRecord{hash: bittorrent.InfoHash{1}, user: "alice"}
	b := ledgerRecord{hash: bittorrent.InfoHash{2}, user: "bob"}
	c := ledgerRecord{hash: bittorrent.InfoHash{1}, user: "bob"}
	entries := []ledgerEntry{
		{ledgerRecord: a, slot: 3, at: 1000, up: 10, down: 20, upCredited: 10, downCred: 0, gap: 500},
		{ledgerRecord: b, slot: 999, at: 1001, up: 1 << 62, down: 0, upCredited: 1 << 62, downCred: 0},
		{ledgerRecord: a, slot: 4, at: 1002, up: 5, down: 6, upCredited: 10, downCred: 6, gap: 2},
		{ledgerRecord: c, slot: 0, at: 1003, up: 7, down: 8, upCredited: 7, downCred: 8, gap: 1},
		{ledgerRecord: a, slot: 3, at: 1004, up: 1, down: 1, upCredited: 1, downCred: 1, gap: 1},
	}
	// many more, so the texts span several buffers
	for i := range 2000 {
		entries = append(entries, ledgerEntry{ledgerRecord: c, slot: int64(i % MaxLedgerEntries), at: int64(2000 + i),
			up: int64(i + 1), down: 1 << 40, upCredited: 2 * int64(i+1), downCred: 0, gap: 30_000})
	}
	got := ledgerWrites(entries)
	require.Equal(t, []ledgerRecord{a, b, c}, got.records)
	text := func(args []any) []string {
		var out []string
		for _, v := range args {
			switch v := v.(type) {
			case string:
				out = append(out, v)
			case []byte:
				out = append(out, string(v))
			default:
				t.Fatalf("argument %T", v)
			}
		}
		return out
	}
	require.Equal(t, []string{"hset", btstore.UserTorrentKey(a.hash, "alice"),
		"l3", "1000,10,20,,0,500", "l4", "1002,5,6,10,,2", "l3", "1004,1,1,,,1"}, text(got.args[0]))
	require.Equal(t, []string{"hset", btstore.UserTorrentKey(b.hash, "bob"),
		"l999", fmt.Sprintf("1001,%d,0,,,0", int64(1<<62))}, text(got.args[1]))
	cArgs := text(got.args[2])
	require.Len(t, cArgs, 2+2*2001)
	require.Equal(t, []string{"l0", "1003,7,8,,,1"}, cArgs[2:4])
	for i := range 2000 {
		require.Equal(t, fmt.Sprintf("l%d", i%MaxLedgerEntries), cArgs[4+2*i])
		require.Equal(t, fmt.Sprintf("%d,%d,%d,%d,0,30000", 2000+i, i+1, int64(1<<40), 2*(i+1)), cArgs[5+2*i])
		// what the record's reader makes of it
		e := ledgerOf(map[string]string{cArgs[4+2*i]: cArgs[5+2*i]})
		require.Len(t, e, 1)
		require.Equal(t, int64(2*(i+1)), e[0].UpCredited)
		require.Equal(t, int64(1<<40), e[0].Downloaded)
	}

	back := ledgerEntriesOf(entries, map[ledgerRecord]bool{a: true, b: true})
	require.Equal(t, []ledgerEntry{entries[0], entries[1], entries[2], entries[4]}, back)
	require.Empty(t, ledgerEntriesOf(entries, map[ledgerRecord]bool{}))
	require.Empty(t, ledgerWrites(nil).args)
}

// TestFailedTotalsAndLedgerWritesWaitForTheNextFlush: a flush whose
// totals or ledger write fails (here the key holds a string) says so and
// keeps exactly those writes, and the next flush writes them once; the
// writes that succeeded are not repeated.
func TestFailedTotalsAndLedgerWritesWaitForTheNextFlush(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, err := New(b.Client, Config{Private: true, Logger: slog.New(slog.DiscardHandler), Watch: WatchConfig{LedgerEntries: 5}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		hash := bittorrent.InfoHash{7}
		record := func(user string) string { return btstore.UserTorrentKey(hash, user) }
		for _, key := range []string{btstore.UserStatsKey("bad"), record("bad")} {
			require.NoError(t, b.Client.Set(ctx, key, "not a hash", 0).Err())
		}
		// addTotalsLocked takes the totals' stored form (raw, then the
		// credited differences: transfer.stored), field by field.
		s.pending.mu.Lock()
		s.pending.addTotalsLocked("good", transfer{10, 20, 10, 0})
		s.pending.addTotalsLocked("bad", transfer{1, 2, 3, 4})
		s.pending.mu.Unlock()
		s.pending.addWatch(&ledgerEntry{ledgerRecord: ledgerRecord{hash: hash, user: "good"}, slot: 1, at: 1000, up: 10, upCredited: 10}, nil)
		s.pending.addWatch(&ledgerEntry{ledgerRecord: ledgerRecord{hash: hash, user: "bad"}, slot: 1, at: 1000, up: 1, upCredited: 1}, nil)
		s.pending.addWatch(&ledgerEntry{ledgerRecord: ledgerRecord{hash: hash, user: "bad"}, slot: 2, at: 1001, up: 2, upCredited: 2}, nil)

		err = s.Flush(ctx)
		require.ErrorContains(t, err, "5 of 9 writes failed") // 4 totals and an HSET of 7 totals and 2 HSETs
		require.Equal(t, map[string]string{"uploaded": "10", "downloaded": "20", "up_extra": "10"},
			b.Client.HGetAll(ctx, btstore.UserStatsKey("good")).Val())
		require.Equal(t, "1000,10,0,,,0", b.Client.HGet(ctx, record("good"), "l1").Val())
		s.pending.mu.Lock()
		require.Equal(t, map[string]*transfer{"bad": {1, 2, 3, 4}}, s.pending.totals)
		require.Len(t, s.pending.ledger, 2)
		s.pending.mu.Unlock()

		require.NoError(t, b.Client.Del(ctx, btstore.UserStatsKey("bad")).Err())
		require.NoError(t, b.Client.Del(ctx, record("bad")).Err())
		require.NoError(t, s.Flush(ctx))
		require.Equal(t, map[string]string{"uploaded": "1", "downloaded": "2", "up_extra": "3", "down_extra": "4"},
			b.Client.HGetAll(ctx, btstore.UserStatsKey("bad")).Val())
		require.Equal(t, map[string]string{"l1": "1000,1,0,,,0", "l2": "1001,2,0,,,0"}, b.Client.HGetAll(ctx, record("bad")).Val())
		require.Equal(t, "10", b.Client.HGet(ctx, btstore.UserStatsKey("good"), "uploaded").Val(), "written once")
	})
}
