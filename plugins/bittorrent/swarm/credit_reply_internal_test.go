package swarm

import (
	"crypto/sha1"
	"log/slog"
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

// TestParseCreditReadsEveryPlace: each place of the credit reply lands
// in its figure, the credited ones as raw plus extra, and the watch
// figures derive from the row and the call's header.
func TestParseCreditReadsEveryPlace(t *testing.T) {
	on := credit(6, 1700000000123, 5000, 700, -2500, 0, tokenUsed, "1700000000001",
		41, "9007199254740993", 9000, 300, -100, 86400000, 3600000, 1699999999999, 29000)
	c, err := parseCredit(on, true)
	require.NoError(t, err)
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

	// No transfer: a row (seed time moved), nothing for the ledger or the signals.
	idle, err := parseCredit(credit(0, 0, 0, 0, 0, 0, 0, 0, 42, 1, 1, 0, 0, 5, 5, 0, 30000), true)
	require.NoError(t, err)
	require.Equal(t, int64(42), idle.row.Seq)
	_, ok = idle.watch(4, 0, 0, true)
	require.False(t, ok)

	off, err := parseCredit(credit(0, 0, 5000, 700), false)
	require.NoError(t, err)
	require.Equal(t, creditReply{moved: transfer{5000, 700, 5000, 700}}, off)
	_, ok = off.watch(4, 0, 0, true)
	require.False(t, ok, "accounting off has no row, so no watch figures")
}

// TestParseCreditRefusesAMalformedReply: a credit reply is exactly its
// width's numbers; another width, or an element that is no number (a
// nested list, as before s46, nil, text that is no integer), is
// errBadReply, read into nothing.
func TestParseCreditRefusesAMalformedReply(t *testing.T) {
	on := credit(make([]any, creditWidthOn)...)
	off := on[:creditWidthOff]
	with := func(v []any, i int, e any) []any {
		v = append([]any(nil), v...)
		v[i] = e
		return v
	}
	for name, tc := range map[string]struct {
		reply      []any
		accounting bool
	}{
		"empty":              {nil, true},
		"off's width, on":    {off, true},
		"on's width, off":    {on, false},
		"one short":          {on[:creditWidthOn-1], true},
		"one too many":       {append(append([]any(nil), off...), int64(1)), false},
		"a nested row":       {with(on, creditSeq, []any{int64(1)}), true},
		"nil":                {with(off, creditUp, nil), false},
		"text, not a number": {with(on, creditGap, "soon"), true},
		"a fraction as text": {with(on, creditUploaded, "1.5"), true},
	} {
		c, err := parseCredit(tc.reply, tc.accounting)
		require.ErrorIs(t, err, errBadReply, name)
		require.Equal(t, creditReply{}, c, name)
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

		// a peer's status and credit reply (accounting on)
		peer := func(status, bits int) []any {
			return credit(append([]any{status, bits, 1700000000000, 5000, 700},
				make([]any, creditWidthOn-creditWidthOff)...)...)
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
		nested[1+creditSeq] = []any{int64(1)}
		for name, bad := range map[string][]any{
			"one peer of two":      reply(peer(codeRefreshed, 6)),
			"one element short":    reply(peer(codeRefreshed, 6), peer(codeDropped, 0))[:len(header)+2*(1+creditWidthOn)-1],
			"accounting off's":     reply(credit(codeRefreshed, 6, 0, 5000, 700), credit(codeDropped, 0, 0, 0, 0)),
			"no peers":             reply(),
			"a nested row":         reply(peer(codeDropped, 0), nested),
			"open mode's statuses": append(header[:7:7], int64(codeRefreshed), int64(codeDropped)),
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
