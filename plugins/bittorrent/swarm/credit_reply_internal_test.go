package swarm

import (
	"crypto/sha1"
	"log/slog"
	"math/bits"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// credit is a reply as go-redis reads one: integers, or text for a
// number past 2^53 (prelude's whole).
func credit(numbers ...any) []any {
	v := make([]any, len(numbers))
	for i, n := range numbers {
		switch n := n.(type) {
		case int:
			v[i] = int64(n)
		case nil:
			v[i] = int64(0)
		default:
			v[i] = n
		}
	}
	return v
}

// with is v with its element i replaced by e, v unchanged.
func with(v []any, i int, e any) []any {
	v = append([]any(nil), v...)
	v[i] = e
	return v
}

// TestParseCreditReadsEveryPlace: each place of the credit reply lands
// in its figure, the credited ones as raw plus extra, a group the mask
// leaves off reads as zeros, and the watch figures derive from the row
// and the call's header. parseCredit takes the reply at its input's
// start and says how much it took.
func TestParseCreditReadsEveryPlace(t *testing.T) {
	all := credit(6, 1700000000123, 5000, 700, creditGroups,
		-2500, 0, // extra
		tokenUsed, "1700000000001", // token
		41, "9007199254740993", 9000, 86400000, 3600000, 29000, // row, gap
		300, -100, // row extra
		1699999999999) // snatched
	c, width, err := parseCredit(append(all, "the next peer's"), true)
	require.NoError(t, err)
	require.Equal(t, len(all), width)
	require.Equal(t, creditFixed+1+13, width, "every group")
	require.Equal(t, creditReply{bits: 6, version: 1700000000123, moved: transfer{5000, 700, 2500, 700},
		tokenEvent: tokenUsed, tokenUsed: 1700000000001, gap: 29000,
		row: FeedRow{Seq: 41, Uploaded: 1<<53 + 1, Downloaded: 9000, UpCredited: 1<<53 + 301, DownCredited: 8900,
			SeedMillis: 86400000, LeechMillis: 3600000, Snatched: 1699999999999}}, c)

	f, ok := c.watch(4, 1<<30, 1699999000000, true)
	require.True(t, ok)
	require.Equal(t, watchFigures{gap: 29000, others: 3, leecherLeft: 1699999000000, size: 1 << 30,
		downloaded: 9000}, f)
	f, ok = c.watch(4, 1<<30, 0, false)
	require.True(t, ok)
	require.Equal(t, int64(4), f.others, "a seeder is not among the leechers")

	// The typical announce: a row alone, 4 + 1 + 6 values; credited = raw.
	typical, width, err := parseCredit(credit(2, 7, 5000, 700, creditRow, 42, 8000, 900, 10, 20, 30000), true)
	require.NoError(t, err)
	require.Equal(t, creditFixed+1+6, width)
	require.Equal(t, creditReply{bits: 2, version: 7, moved: transfer{5000, 700, 5000, 700}, gap: 30000,
		row: FeedRow{Seq: 42, Uploaded: 8000, Downloaded: 900, UpCredited: 8000, DownCredited: 900,
			SeedMillis: 10, LeechMillis: 20}}, typical)

	// Each group alone lands in its places and leaves the others zero.
	for name, tc := range map[string]struct {
		reply []any
		want  creditReply
	}{
		"extra": {credit(0, 0, 100, 50, creditExtra, 100, -50),
			creditReply{moved: transfer{100, 50, 200, 0}}},
		"token": {credit(0, 0, 0, 0, creditToken, tokenEnded, 1234),
			creditReply{tokenEvent: tokenEnded, tokenUsed: 1234}},
		"row extra": {credit(0, 0, 0, 0, creditRow|creditRowExtra, 3, 10, 20, 0, 0, 0, 5, 6),
			creditReply{row: FeedRow{Seq: 3, Uploaded: 10, Downloaded: 20, UpCredited: 15, DownCredited: 26}}},
		"snatched": {credit(0, 0, 0, 0, creditRow|creditSnatched, 3, 10, 20, 0, 0, 0, 99),
			creditReply{row: FeedRow{Seq: 3, Uploaded: 10, Downloaded: 20, UpCredited: 10, DownCredited: 20,
				Snatched: 99}}},
		"none": {credit(0, 0, 8, 9, 0), creditReply{moved: transfer{8, 9, 8, 9}}},
	} {
		c, width, err := parseCredit(tc.reply, true)
		require.NoError(t, err, name)
		require.Equal(t, len(tc.reply), width, name)
		require.Equal(t, tc.want, c, name)
	}

	// No transfer: a row (seed time moved), nothing for the ledger or the signals.
	idle, _, err := parseCredit(credit(0, 0, 0, 0, creditRow, 42, 1, 1, 5, 5, 30000), true)
	require.NoError(t, err)
	require.Equal(t, int64(42), idle.row.Seq)
	_, ok = idle.watch(4, 0, 0, true)
	require.False(t, ok)

	off, width, err := parseCredit(credit(0, 0, 5000, 700, "the next peer's"), false)
	require.NoError(t, err)
	require.Equal(t, creditFixed, width, "accounting off: no mask")
	require.Equal(t, creditReply{moved: transfer{5000, 700, 5000, 700}}, off)
	_, ok = off.watch(4, 0, 0, true)
	require.False(t, ok, "accounting off has no row, so no watch figures")
}

// TestParseCreditRefusesAMalformedReply: a credit reply is its fixed
// numbers and, with accounting, a mask of known bits and the groups it
// names; fewer elements, a mask with an unknown bit or a row's part
// without the row, or an element that is no number (a nested list, as
// before s46, nil, text that is no integer), is errBadReply, read into
// nothing.
func TestParseCreditRefusesAMalformedReply(t *testing.T) {
	on := credit(0, 0, 0, 0, creditGroups, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	off := on[:creditFixed]
	for name, tc := range map[string]struct {
		reply      []any
		accounting bool
	}{
		"empty":                 {nil, true},
		"empty, off":            {nil, false},
		"off's width, on":       {off, true},
		"one short":             {on[:len(on)-1], true},
		"one short, off":        {off[:creditFixed-1], false},
		"the row's part short":  {credit(0, 0, 0, 0, creditRow, 1, 2, 3, 4, 5), true},
		"an unknown bit":        {with(on, creditFixed, int64(creditGroups+1)), true},
		"a negative mask":       {with(on, creditFixed, int64(-1)), true},
		"row extra, no row":     {credit(0, 0, 0, 0, creditRowExtra, 1, 2), true},
		"snatched, no row":      {credit(0, 0, 0, 0, creditSnatched, 1), true},
		"a mask that is text":   {with(on, creditFixed, "row"), true},
		"a nested row":          {with(on, creditFixed+5, []any{int64(1)}), true},
		"nil":                   {with(off, 2, nil), false},
		"text, not a number":    {with(on, creditFixed+10, "soon"), true},
		"a fraction as text":    {with(on, creditFixed+6, "1.5"), true},
		"a nested list, last":   {with(on, len(on)-1, []any{}), true},
		"a nested list, fixed":  {with(on, 1, []any{}), true},
		"text in the fixed, on": {with(on, 3, "x"), true},
	} {
		c, width, err := parseCredit(tc.reply, tc.accounting)
		require.ErrorIs(t, err, errBadReply, name)
		require.Equal(t, creditReply{}, c, name)
		require.Zero(t, width, name)
	}
}

// TestApplyPeersRefusesAMalformedReply: a refresh.lua reply that does not
// match the call's peers is an error, and nothing of it is applied: no
// totals, no state, no peer forgotten.
func TestApplyPeersRefusesAMalformedReply(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		s, err := New(b.Client, Config{Private: true, Logger: slog.New(slog.DiscardHandler),
			Clock: NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Stop() })
		require.NotNil(t, s.writeBehind)
		w := s.writeBehind

		hash := bittorrent.InfoHash(sha1.Sum([]byte("malformed")))
		var id1, id2 bittorrent.PeerID
		id1[0], id2[0] = 1, 2
		call := &refreshCall{hash: hash, ids: []bittorrent.PeerID{id1, id2},
			peers: []queuedRefresh{{user: "u1", at: 1000, left: 5}, {user: "u2", at: 1000}}}
		w.peers.put(peerKey{hash: hash, peer: id2}, knownPeer{user: "u2", last: 1000})

		// a peer's status and credit reply (accounting on): a row, whose
		// width the next peer's place depends on
		peer := func(status, bits int) []any {
			return credit(status, bits, 1700000000000, 5000, 700, creditRow, 1, 5000, 700, 10, 0, 30000)
		}
		header := []any{int64(codeRefreshed), int64(3), int64(2), "0", "t1", "", "", "1000", "0"}
		reply := func(parts ...[]any) []any {
			v := append([]any(nil), header...)
			for _, p := range parts {
				v = append(v, p...)
			}
			return v
		}
		nested := peer(codeRefreshed, 6)
		nested[1+creditFixed+1] = []any{int64(1)}
		badMask := peer(codeRefreshed, 6)
		badMask[1+creditFixed] = int64(creditGroups + 1)
		for name, bad := range map[string][]any{
			"one peer of two":      reply(peer(codeRefreshed, 6)),
			"one element short":    reply(peer(codeRefreshed, 6), peer(codeDropped, 0))[:len(header)+2*len(peer(0, 0))-1],
			"one element too many": append(reply(peer(codeRefreshed, 6), peer(codeDropped, 0)), int64(0)),
			"a mask wider than its peer": reply(with(peer(codeRefreshed, 6), 1+creditFixed, int64(creditRow|creditSnatched)),
				peer(codeDropped, 0)),
			"a bad mask bit":             reply(peer(codeDropped, 0), badMask),
			"a peer's status, no credit": reply(peer(codeRefreshed, 6), credit(codeDropped)),
			"accounting off's":           reply(credit(codeRefreshed, 6, 0, 5000, 700), credit(codeDropped, 0, 0, 0, 0)),
			"no peers":                   reply(),
			"a nested row":               reply(peer(codeDropped, 0), nested),
			"open mode's statuses":       append(header[:7:7], int64(codeRefreshed), int64(codeDropped)),
		} {
			err := w.applyPeers(call, bad)
			require.ErrorIs(t, err, errBadReply, name)
			require.Zero(t, s.pending.size(), "%s: nothing applied", name)
			require.Zero(t, w.dropped.Load(), name)
			_, known := w.peers.get(peerKey{hash: hash, peer: id2})
			require.True(t, known, "%s: no peer forgotten", name)
		}

		// The same call with a well-formed reply applies both peers.
		require.NoError(t, w.applyPeers(call, reply(peer(codeRefreshed, 6), peer(codeDropped, 0))))
		require.NotZero(t, s.pending.size())
		require.Equal(t, int64(1), w.dropped.Load())
		_, known := w.peers.get(peerKey{hash: hash, peer: id2})
		require.False(t, known, "the dropped peer is forgotten")
	})
}

// The widest reply parseCredit reads into its array is the fixed values,
// the mask and every group's width.
func TestCreditMaxWidthHoldsEveryGroup(t *testing.T) {
	sum := creditFixed + 1
	for _, w := range creditGroupWidth {
		sum += w
	}
	require.Equal(t, sum, creditMaxWidth)
	require.Len(t, creditGroupWidth, bits.Len(uint(creditGroups)), "a width per mask bit")
}
