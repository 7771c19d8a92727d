package swarm

import (
	"fmt"
	"strconv"
)

// The credit reply: what announce.lua (at its reply's end) and
// refresh.lua (per peer, after its status) answer for one announce of a
// user (prelude's user_announce and credit_none). It is flat and holds
// numbers only: a nested list per announce cost Redis a Lua table and a
// reply array, and the frontend a []any with every element boxed (s46).
// Its width is named here and handed to the scripts as R.CREDIT_OFF and
// R.CREDIT_ON (announceCodes, refreshCodes); the places below are
// prelude's order.
const (
	creditWidthOff = 4  // accounting off: bits, version, up, down
	creditWidthOn  = 17 // accounting on: those, then credit, token, row and gap
)

// The places in a credit reply.
const (
	creditBits    = iota // the user's state bits, 0: unchanged
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
	bits, version int64 // bits 0: unchanged
	moved         transfer
	tokenEvent    int64
	tokenUsed     int64
	row           FeedRow // Seq 0: no row; UserID unset
	gap           int64
}

// parseCredit reads a credit reply of the width accounting gives. An
// element that is no number, or a reply of another width, is an error:
// nothing of it is applied.
func parseCredit(v []any, accounting bool) (creditReply, error) {
	var c creditReply
	if len(v) != creditWidth(accounting) {
		return c, fmt.Errorf("%w: a credit reply of %d elements, want %d", errBadReply, len(v), creditWidth(accounting))
	}
	var n [creditWidthOn]int64
	for i, e := range v {
		var ok bool
		if n[i], ok = replyNumber(e); !ok {
			return c, fmt.Errorf("%w: credit reply element %d is %T, want a number", errBadReply, i, e)
		}
	}
	c.bits, c.version = n[creditBits], n[creditVersion]
	up, down := n[creditUp], n[creditDown]
	c.moved = transfer{up, down, up + n[creditUpExtra], down + n[creditDownExtra]}
	if !accounting {
		return c, nil
	}
	c.tokenEvent, c.tokenUsed, c.gap = n[creditTokenEvent], n[creditTokenUsed], n[creditGap]
	if n[creditSeq] != 0 {
		uploaded, downloaded := n[creditUploaded], n[creditDownloaded]
		c.row = FeedRow{Seq: n[creditSeq], Uploaded: uploaded, Downloaded: downloaded,
			UpCredited: uploaded + n[creditUpExtraTotal], DownCredited: downloaded + n[creditDownExtraTotal],
			SeedMillis: n[creditSeedMillis], LeechMillis: n[creditLeechMillis], Snatched: n[creditSnatched]}
	}
	return c, nil
}

// watch is the cheat signals' figures of the announce (watchTransfer): with accounting on and transfer (the row then exists,
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
	return watchFigures{gap: c.gap, others: others, leecherLeft: leecherLeft, size: size,
		downloaded: c.row.Downloaded}, true
}

// replyNumber reads a reply element that is a number: an integer, or a
// bulk string in decimal (a figure past 2^53, which Lua returns as text,
// or a stored field passed back as it is).
func replyNumber(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
