package swarm

import (
	"fmt"
	"math"
)

// The credit reply: what announce.lua (at its reply's end) and
// refresh.lua (per peer, after its status) answer for one announce of a
// user (prelude's user_announce and credit_none), its numbers packed as
// little-endian doubles (prelude's credit_pack). A Lua number is a
// double, so each comes back exactly as the script held it; Redis makes
// one string where it made one reply integer per number (and before s46
// two nested arrays per announce), and the frontend reads it without
// go-redis boxing each integer into an interface. The width is named here
// and handed to the scripts as R.CREDIT_OFF and R.CREDIT_ON
// (announceCodes, refreshCodes); the places below are prelude's order.
const (
	creditWidthOff = 4  // accounting off: bits, version, up, down
	creditWidthOn  = 17 // accounting on: those, then credit, token, row and gap
)

// The places in a credit reply.
const (
	creditBits    = iota // the user's state bits, -1: unchanged
	creditVersion        // their version
	creditUp             // raw deltas since the peer's previous announce
	creditDown
	creditUpExtra // accounting on: credited less raw, this announce
	creditDownExtra
	creditTokenEvent // 0, tokenUsed or tokenEnded
	creditTokenUsed  // ms of the token's first use, 0 without an event
	creditSeq        // the record's feed row (user_feed), seq 0: none
	creditUploaded
	creditDownloaded
	creditUpExtraTotal
	creditDownExtraTotal
	creditSeedMillis
	creditLeechMillis
	creditSnatched
	creditGap // ms since the peer's previous announce, 0: unknown
)

// creditWidth is a credit reply's width with accounting on or off.
func creditWidth(accounting bool) int {
	if accounting {
		return creditWidthOn
	}
	return creditWidthOff
}

// creditReply is one credit reply, read into figures.
type creditReply struct {
	bits, version int64 // bits -1: unchanged
	moved         transfer
	tokenEvent    int64
	tokenUsed     int64
	row           FeedRow // Seq 0: no row; UserID unset
	gap           int64
}

// parseCredit reads a credit reply of the width accounting gives from
// packed, which holds exactly one. A reply of another size is an error:
// nothing of it is applied.
func parseCredit(packed string, accounting bool) (creditReply, error) {
	var c creditReply
	width := creditWidth(accounting)
	if len(packed) != 8*width {
		return c, fmt.Errorf("%w: a credit reply of %d bytes, want %d numbers", errBadReply, len(packed), width)
	}
	c.bits, c.version = packedNumber(packed, creditBits), packedNumber(packed, creditVersion)
	up, down := packedNumber(packed, creditUp), packedNumber(packed, creditDown)
	c.moved = transfer{up, down, up, down}
	if !accounting {
		return c, nil
	}
	c.moved[2] += packedNumber(packed, creditUpExtra)
	c.moved[3] += packedNumber(packed, creditDownExtra)
	c.tokenEvent, c.tokenUsed = packedNumber(packed, creditTokenEvent), packedNumber(packed, creditTokenUsed)
	c.gap = packedNumber(packed, creditGap)
	if seq := packedNumber(packed, creditSeq); seq != 0 {
		uploaded, downloaded := packedNumber(packed, creditUploaded), packedNumber(packed, creditDownloaded)
		c.row = FeedRow{Seq: seq, Uploaded: uploaded, Downloaded: downloaded,
			UpCredited:   uploaded + packedNumber(packed, creditUpExtraTotal),
			DownCredited: downloaded + packedNumber(packed, creditDownExtraTotal),
			SeedMillis:   packedNumber(packed, creditSeedMillis), LeechMillis: packedNumber(packed, creditLeechMillis),
			Snatched: packedNumber(packed, creditSnatched)}
	}
	return c, nil
}

// packedNumber is the i-th number of packed doubles (credit_pack), a
// whole number as the scripts keep them. One past int64 (a client may
// report counters up to 2^64) is held at the bound, NaN read as 0: a
// script makes neither from figures it stores.
func packedNumber(packed string, i int) int64 {
	b := packed[8*i : 8*i+8]
	f := math.Float64frombits(uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56)
	switch {
	case f != f:
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// watch is the ledger's and the cheat signals' figures of the announce
// (watchTransfer): with accounting on and transfer (the row then exists,
// since the transfer changed the record's fed figures), else false.
// leechers, size and leecherLeft are the call's (the reply's header);
// leeching: the peer is in the swarm's leechers after the announce, so
// not among the others.
func (c *creditReply) watch(leechers, size, leecherLeft int64, leeching bool) (watchFigures, bool) {
	if c.row.Seq == 0 || (c.moved[0] <= 0 && c.moved[1] <= 0) {
		return watchFigures{}, false
	}
	others := leechers
	if leeching {
		others--
	}
	return watchFigures{seq: c.row.Seq, gap: c.gap, others: others, leecherLeft: leecherLeft, size: size,
		downloaded: c.row.Downloaded}, true
}
