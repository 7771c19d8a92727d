package swarm

import (
	"crypto/sha1"
	"encoding/binary"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// packCredit packs numbers as prelude's credit_pack does: little-endian
// doubles.
func packCredit(numbers ...float64) string {
	b := make([]byte, 0, 8*len(numbers))
	for _, n := range numbers {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(n))
	}
	return string(b)
}

// TestParseCreditReadsEveryPlace: each place of the credit reply lands
// in its figure, the credited ones as raw plus extra, and the watch
// figures derive from the row and the call's header.
func TestParseCreditReadsEveryPlace(t *testing.T) {
	on := packCredit(6, 1700000000123, 5000, 700, -2500, 0, tokenUsed, 1700000000001,
		41, 1<<40, 9000, 300, -100, 86400000, 3600000, 1699999999999, 29000)
	c, err := parseCredit(on, true)
	require.NoError(t, err)
	require.Equal(t, creditReply{bits: 6, version: 1700000000123, moved: transfer{5000, 700, 2500, 700},
		tokenEvent: tokenUsed, tokenUsed: 1700000000001, gap: 29000,
		row: FeedRow{Seq: 41, Uploaded: 1 << 40, Downloaded: 9000, UpCredited: 1<<40 + 300, DownCredited: 8900,
			SeedMillis: 86400000, LeechMillis: 3600000, Snatched: 1699999999999}}, c)

	f, ok := c.watch(4, 1<<30, 1699999000000, true)
	require.True(t, ok)
	require.Equal(t, watchFigures{seq: 41, gap: 29000, others: 3, leecherLeft: 1699999000000, size: 1 << 30,
		downloaded: 9000}, f)
	f, ok = c.watch(4, 1<<30, 0, false)
	require.True(t, ok)
	require.Equal(t, int64(4), f.others, "a seeder is not among the leechers")

	// No transfer, or no row: nothing for the ledger or the signals.
	idle, err := parseCredit(packCredit(-1, 0, 0, 0, 0, 0, 0, 0, 42, 1, 1, 0, 0, 5, 5, 0, 30000), true)
	require.NoError(t, err)
	require.Equal(t, int64(42), idle.row.Seq)
	_, ok = idle.watch(4, 0, 0, true)
	require.False(t, ok)

	off, err := parseCredit(packCredit(-1, 0, 5000, 700), false)
	require.NoError(t, err)
	require.Equal(t, creditReply{bits: -1, moved: transfer{5000, 700, 5000, 700}}, off)
	_, ok = off.watch(4, 0, 0, true)
	require.False(t, ok, "accounting off has no row, so no watch figures")
}

// TestParseCreditRefusesAReplyOfAnotherSize: a credit reply is exactly
// its width's numbers; anything else is errBadReply, read into nothing.
func TestParseCreditRefusesAReplyOfAnotherSize(t *testing.T) {
	on := packCredit(make([]float64, creditWidthOn)...)
	off := packCredit(make([]float64, creditWidthOff)...)
	for name, tc := range map[string]struct {
		packed     string
		accounting bool
	}{
		"empty":               {"", true},
		"off's width, on":     {off, true},
		"on's width, off":     {on, false},
		"one byte short":      {on[:len(on)-1], true},
		"one number too many": {off + packCredit(1), false},
	} {
		c, err := parseCredit(tc.packed, tc.accounting)
		require.ErrorIs(t, err, errBadReply, name)
		require.Equal(t, creditReply{}, c, name)
	}
}

// TestPackedNumberHoldsItsBounds: a double past int64 (a client's
// counter near 2^64) is held at the bound, never wrapped.
func TestPackedNumberHoldsItsBounds(t *testing.T) {
	packed := packCredit(math.Pow(2, 64), -math.Pow(2, 64), math.NaN(), -3, 1<<53+2)
	require.Equal(t, int64(math.MaxInt64), packedNumber(packed, 0))
	require.Equal(t, int64(math.MinInt64), packedNumber(packed, 1))
	require.Equal(t, int64(0), packedNumber(packed, 2))
	require.Equal(t, int64(-3), packedNumber(packed, 3))
	require.Equal(t, int64(1<<53+2), packedNumber(packed, 4))
}

// TestApplyPeersRefusesAMalformedReply: a refresh.lua reply whose packed
// peers do not match the call's peers is an error, and nothing of it is
// applied: no totals, no state, no peer forgotten.
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

		peer := func(status float64, bits float64) string {
			return packCredit(append([]float64{status, bits, 1700000000000, 5000, 700},
				make([]float64, creditWidthOn-creditWidthOff)...)...)
		}
		header := []any{int64(codeRefreshed), int64(3), int64(2), "0", "t1", "", "", "1000", "0"}
		for name, reply := range map[string][]any{
			"one peer of two":      append(header[:len(header):len(header)], peer(codeRefreshed, 6)),
			"a byte short":         append(header[:len(header):len(header)], (peer(codeRefreshed, 6) + peer(codeDropped, -1))[1:]),
			"accounting off's":     append(header[:len(header):len(header)], packCredit(codeRefreshed, 6, 0, 5000, 700, codeDropped, -1, 0, 0, 0)),
			"no packed peers":      header[:len(header):len(header)],
			"not a string":         append(header[:len(header):len(header)], int64(7)),
			"open mode's statuses": append(header[:7:7], int64(codeRefreshed), int64(codeDropped)),
		} {
			err := w.applyPeers(call, reply)
			require.ErrorIs(t, err, errBadReply, name)
			require.Zero(t, s.pending.size(), "%s: nothing applied", name)
			require.Zero(t, w.dropped.Load(), name)
			_, known := w.peers.get(peerKey{hash: hash, peer: id2})
			require.True(t, known, "%s: no peer forgotten", name)
		}

		// The same call with a well-formed reply applies both peers.
		reply := append(header[:len(header):len(header)], peer(codeRefreshed, 6)+peer(codeDropped, -1))
		require.NoError(t, w.applyPeers(call, reply))
		require.NotZero(t, s.pending.size())
		require.Equal(t, int64(1), w.dropped.Load())
		_, known := w.peers.get(peerKey{hash: hash, peer: id2})
		require.False(t, known, "the dropped peer is forgotten")
	})
}
