package swarm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

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
