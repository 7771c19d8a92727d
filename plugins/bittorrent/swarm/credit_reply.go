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
//
// Every reply starts with creditFixed values: the user's state bits (0:
// unchanged), their version, and the raw deltas up and down since the
// peer's previous announce. With accounting off that is all. With
// accounting on one integer mask follows, then only the groups whose bit
// it sets, in the bits' order: each value Redis converts out of Lua and
// the frontend reads costs both (350-570 Redis instructions a value by
// callgrind, s47), and most of the 13 values accounting added were zeros
// on nearly every announce. The bits are named here and handed to
// the scripts as R.CREDIT_* (announceCodes, refreshCodes).
const creditFixed = 4 // bits, version, up, down

// The groups of an accounting reply, as bits of its mask and in the
// order they follow it. What is left off is zero.
const (
	// this announce's credited less raw, up and down: a multiplier or a
	// token (user_credit) moved them
	creditExtra = 1 << iota
	// the token event (tokenUsed, tokenEnded) and the token's first use (ms)
	creditToken
	// the record's feed row when its fed figures changed (user_feed):
	// seq, uploaded, downloaded, seed_ms, leech_ms, then the gap (ms
	// since the peer's previous announce, 0: unknown)
	creditRow
	// with creditRow: the row's cumulative credited less raw (up_extra,
	// down_extra), once a multiplier or token ever moved them
	creditRowExtra
	// with creditRow: the row's snatched (ms), once the user snatched
	creditSnatched

	creditGroups = creditSnatched<<1 - 1 // every bit a mask may set
)

// creditGroupWidth is how many values follow the mask for each group,
// indexed by the group's bit number.
var creditGroupWidth = [...]int{2, 2, 6, 2, 1}

// creditMaxWidth is the widest credit reply: the fixed values, the mask
// and every group.
const creditMaxWidth = creditFixed + 1 + 2 + 2 + 6 + 2 + 1

// creditReply is one credit reply, read into figures.
type creditReply struct {
	bits, version int64 // bits 0: unchanged
	moved         transfer
	tokenEvent    int64
	tokenUsed     int64
	row           FeedRow // Seq 0: no row; UserID unset
	gap           int64
}

// parseCredit reads the credit reply at v's start (accounting tells its
// layout; v may go on past it) and returns it with how many elements it
// took. An element that is no number, a mask with an unknown bit or a
// row's part without the row, or a reply shorter than its mask says, is
// an error: nothing of it is read.
func parseCredit(v []any, accounting bool) (creditReply, int, error) {
	var c creditReply
	var n [creditMaxWidth]int64
	// numbers reads v[from:to] into n
	numbers := func(from, to int) error {
		for i := from; i < to; i++ {
			var ok bool
			if n[i], ok = replyNumber(v[i]); !ok {
				return fmt.Errorf("%w: credit reply element %d is %T, want a number", errBadReply, i, v[i])
			}
		}
		return nil
	}
	width := creditFixed
	if accounting {
		width++
	}
	if len(v) < width {
		return c, 0, fmt.Errorf("%w: a credit reply of %d elements, want at least %d", errBadReply, len(v), width)
	}
	if err := numbers(0, width); err != nil {
		return c, 0, err
	}
	up, down := n[2], n[3]
	if !accounting {
		c.bits, c.version, c.moved = n[0], n[1], transfer{up, down, up, down}
		return c, width, nil
	}
	mask := n[creditFixed]
	if mask&^creditGroups != 0 || (mask&(creditRowExtra|creditSnatched) != 0 && mask&creditRow == 0) {
		return c, 0, fmt.Errorf("%w: credit reply mask %d", errBadReply, mask)
	}
	for g, w := range creditGroupWidth {
		if mask&(1<<g) != 0 {
			width += w
		}
	}
	if len(v) < width {
		return c, 0, fmt.Errorf("%w: a credit reply of %d elements, mask %d wants %d", errBadReply, len(v), mask, width)
	}
	if err := numbers(creditFixed+1, width); err != nil {
		return c, 0, err
	}
	c.bits, c.version, c.moved = n[0], n[1], transfer{up, down, up, down}
	g := n[creditFixed+1:] // the groups, in order
	if mask&creditExtra != 0 {
		c.moved[2], c.moved[3] = up+g[0], down+g[1]
		g = g[2:]
	}
	if mask&creditToken != 0 {
		c.tokenEvent, c.tokenUsed = g[0], g[1]
		g = g[2:]
	}
	if mask&creditRow != 0 {
		c.row = FeedRow{Seq: g[0], Uploaded: g[1], Downloaded: g[2], UpCredited: g[1], DownCredited: g[2],
			SeedMillis: g[3], LeechMillis: g[4]}
		c.gap = g[5]
		g = g[6:]
		if mask&creditRowExtra != 0 {
			c.row.UpCredited, c.row.DownCredited = c.row.Uploaded+g[0], c.row.Downloaded+g[1]
			g = g[2:]
		}
		if mask&creditSnatched != 0 {
			c.row.Snatched = g[0]
		}
	}
	return c, width, nil
}

// watch is the cheat signals' figures of the announce (watchTransfer):
// with accounting on and transfer (the row then exists, since the
// transfer changed the record's fed figures), else false.
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
