package queues

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claim is one item out, as its claim record (lua/prelude.lua parse_claim)
// and the deadline index describe it.
type Claim struct {
	Item       string    `json:"item"`
	Downloader string    `json:"downloader"`
	IP         string    `json:"ip"`
	ClaimedAt  time.Time `json:"claimed_at"`
	// TimesClaimed counts every hand-out of the item, reclaims included.
	TimesClaimed int `json:"times_claimed"`
	// Deadline is when the item may be reclaimed (while reclaiming is on):
	// its score in the deadline index, which every claim has.
	Deadline time.Time `json:"deadline,omitzero"`
	// Earlier are the item's earlier claimants, newest first; they may
	// still complete it.
	Earlier []string `json:"earlier,omitempty"`
	// Group is the limit group the item was served under ("" = none).
	Group string `json:"group,omitempty"`

	// batch is the claim batch whose deadline the item has ("" = its own
	// in deadlines).
	batch string
}

// parseClaimRecord reads "<times> <claimed at ms> <downloader> <ip>
// <earlier> <group>", the format lua/prelude.lua writes; "-" stands for
// no earlier claimants and no group.
func parseClaimRecord(item, record string) (Claim, bool) {
	// Split on single spaces, as parse_claim's anchored pattern does.
	f := strings.Split(record, " ")
	if len(f) != 6 || slices.Contains(f, "") {
		return Claim{}, false
	}
	var batch string
	if strings.HasPrefix(f[4], "#") {
		// A claim batch's item: its earlier claimants name its batch.
		batch, f[4] = f[4][1:], "-"
	}
	times, err1 := strconv.Atoi(f[0])
	at, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Claim{}, false
	}
	c := Claim{Item: item, TimesClaimed: times, ClaimedAt: time.UnixMilli(at).UTC(), Downloader: f[2], IP: f[3], batch: batch}
	if f[4] != "-" {
		c.Earlier = strings.Split(f[4], ",")
	}
	if f[5] != "-" {
		c.Group = f[5]
	}
	return c, true
}

// ClaimFilter selects claims to list: the zero filter selects every one.
type ClaimFilter struct {
	// OlderThan selects claims made at least this long ago (0 = any age).
	OlderThan time.Duration
	// Downloader selects one downloader's claims ("" = anyone's).
	Downloader string
}

// ClaimCursor is where a claims listing continues: after the item Item
// whose reclaim deadline is AfterMillis (deadlines orders equal deadlines
// by item name). The zero cursor starts at the earliest deadline.
type ClaimCursor struct {
	AfterMillis int64
	Item        string
}

// String encodes the cursor for a URL ("" for the zero cursor).
func (c ClaimCursor) String() string {
	if c.Item == "" {
		return ""
	}
	return strconv.FormatInt(c.AfterMillis, 10) + ":" + c.Item
}

// ParseClaimCursor reads what ClaimCursor.String wrote.
func ParseClaimCursor(s string) (ClaimCursor, error) {
	if s == "" {
		return ClaimCursor{}, nil
	}
	ms, item, ok := strings.Cut(s, ":")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || ValidateItem(item) != nil {
		return ClaimCursor{}, errorf("queues.ParseClaimCursor", CodeInvalid, "bad cursor %q (pass back the \"next\" of the previous page)", truncate(s, 80))
	}
	return ClaimCursor{AfterMillis: at, Item: item}, nil
}

// MaxClaimsPage caps a page of Claims.
const MaxClaimsPage = 10000

// claimsReadPage is how many members of deadlines one read takes.
const claimsReadPage = 1000

// Claims lists up to limit claims the filter selects, earliest reclaim
// deadline first (for claims made under one TTL, oldest first), starting
// after cursor, and the cursor of the next page (zero when there is none).
// It reads the deadlines a page at a time, so a project with millions of
// items out is never loaded whole; an age filter reads every page, since
// a claim's age is in its record, not in the order.
func (e *Engine) Claims(ctx context.Context, slug string, filter ClaimFilter, cursor ClaimCursor, limit int) ([]Claim, ClaimCursor, error) {
	const op = "queues.Claims"
	if limit < 1 || limit > MaxClaimsPage {
		return nil, ClaimCursor{}, errorf(op, CodeInvalid, "limit must be between 1 and %d", MaxClaimsPage)
	}
	var page []Claim
	err := e.eachClaim(ctx, op, slug, filter, cursor, func(c Claim) bool {
		page = append(page, c)
		return len(page) < limit
	})
	if err != nil {
		return nil, ClaimCursor{}, err
	}
	if len(page) < limit {
		return page, ClaimCursor{}, nil
	}
	last := page[len(page)-1]
	return page, ClaimCursor{AfterMillis: last.Deadline.UnixMilli(), Item: last.Item}, nil
}

// EachClaim calls fn for every claim the filter selects, earliest deadline
// first, reading a page at a time; fn returning false stops it.
func (e *Engine) EachClaim(ctx context.Context, slug string, filter ClaimFilter, fn func(Claim) bool) error {
	return e.eachClaim(ctx, "queues.EachClaim", slug, filter, ClaimCursor{}, fn)
}

func (e *Engine) eachClaim(ctx context.Context, op, slug string, filter ClaimFilter, cursor ClaimCursor, fn func(Claim) bool) error {
	if filter.Downloader != "" {
		if err := ValidateDownloader(filter.Downloader); err != nil {
			return err
		}
	}
	if filter.OlderThan < 0 {
		return errorf(op, CodeInvalid, "older_than must not be negative")
	}
	if _, err := e.Project(ctx, slug); err != nil {
		return err
	}
	// The cutoff is fixed when the listing starts, like ReleaseClaims'.
	cutoff := claimCutoff(e.clock.Now(), filter.OlderThan)
	return e.claimPages(ctx, op, slug, cursor, func(page []Claim) bool {
		for _, c := range page {
			if c.ClaimedAt.UnixMilli() > cutoff || (filter.Downloader != "" && c.Downloader != filter.Downloader) {
				continue
			}
			if !fn(c) {
				return false
			}
		}
		return true
	})
}

// claimCutoff is the latest claim time (ms) a filter of claims made at
// least olderThan ago selects; with olderThan 0, every claim made so far.
func claimCutoff(now time.Time, olderThan time.Duration) int64 {
	return now.Add(-olderThan).UnixMilli()
}

// claimPages calls fn with the claims out after cursor, a page at a time
// in deadline order; fn returning false stops it. A claim completed or
// released since its page was read is left out. Claims that change while
// it pages may be seen again later in the order (a reclaim moves its
// deadline) or not at all (completed): callers filter by claim time.
//
// The order merges deadlines with the claim batches (BatchesKey), each of
// whose items has its batch's deadline: a page reads both sets from the
// cursor, and only entries before the last deadline of a set that filled
// its read are complete (more may share that deadline in the next read).
func (e *Engine) claimPages(ctx context.Context, op, slug string, cursor ClaimCursor, fn func([]Claim) bool) error {
	min := "-inf"
	if cursor.Item != "" {
		min = strconv.FormatInt(cursor.AfterMillis, 10)
	}
	read := int64(claimsReadPage)
	type entry struct {
		at          int64
		item, batch string
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		members, err := e.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: DeadlinesKey(slug), Start: min, Stop: "+inf", ByScore: true, Count: read,
		}).Result()
		if err != nil {
			return unavailable(op, err)
		}
		// A batch holds up to 1000 items: read fewer of them.
		batchRead := max(1, read/claimsBatchesPerItems)
		batches, err := e.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: BatchDeadlinesKey(slug), Start: min, Stop: "+inf", ByScore: true, Count: batchRead,
		}).Result()
		if err != nil {
			return unavailable(op, err)
		}
		bounded, bound := false, int64(0)
		if int64(len(members)) == read {
			bounded, bound = true, int64(members[len(members)-1].Score)
		}
		if int64(len(batches)) == batchRead {
			if at := int64(batches[len(batches)-1].Score); !bounded || at < bound {
				bounded, bound = true, at
			}
		}
		fresh := make([]entry, 0, len(members))
		keep := func(x entry) {
			// Members with the cursor's deadline sort by name: skip those
			// up to and including the cursor's item.
			if bounded && x.at >= bound {
				return
			}
			if x.at == cursor.AfterMillis && cursor.Item != "" && x.item <= cursor.Item {
				return
			}
			fresh = append(fresh, x)
		}
		for _, m := range members {
			item, _ := m.Member.(string)
			keep(entry{at: int64(m.Score), item: item})
		}
		if len(batches) > 0 {
			fields := make([]string, len(batches))
			for i, b := range batches {
				id, _ := b.Member.(string)
				fields[i] = "i" + id
			}
			values, err := e.rdb.HMGet(ctx, BatchesKey(slug), fields...).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return unavailable(op, err)
			}
			for i, v := range values {
				value, _ := v.(string)
				lines := strings.Split(value, "\n")
				for _, item := range lines[1:] {
					keep(entry{at: int64(batches[i].Score), item: item, batch: fields[i][1:]})
				}
			}
		}
		if len(fresh) == 0 {
			if !bounded {
				return nil
			}
			// A full read of claims due in one millisecond, all seen:
			// read more of that millisecond.
			read *= 2
			continue
		}
		read = claimsReadPage
		slices.SortFunc(fresh, func(a, b entry) int {
			if a.at != b.at {
				return cmp.Compare(a.at, b.at)
			}
			return strings.Compare(a.item, b.item)
		})
		items := make([]string, len(fresh))
		for i, x := range fresh {
			items[i] = x.item
		}
		records, err := e.claimRecords(ctx, op, slug, items)
		if err != nil {
			return err
		}
		page := make([]Claim, 0, len(items))
		for _, x := range fresh {
			cursor = ClaimCursor{AfterMillis: x.at, Item: x.item}
			// Each item is listed from where its record says its deadline
			// is: its batch, or deadlines.
			if c, ok := records[x.item]; ok && c.batch == x.batch {
				c.Deadline = time.UnixMilli(x.at).UTC()
				page = append(page, c)
			}
		}
		if !fn(page) {
			return nil
		}
		min = strconv.FormatInt(cursor.AfterMillis, 10)
		if !bounded {
			return nil
		}
	}
}

// claimsBatchesPerItems is how many fewer claim batches than deadlines a
// page of claims reads.
const claimsBatchesPerItems = 10

// claimRecords reads and parses the claim records of items in one round
// trip; an item with no (or an unreadable) record is absent.
func (e *Engine) claimRecords(ctx context.Context, op, slug string, items []string) (map[string]Claim, error) {
	records, err := e.rdb.HMGet(ctx, ClaimsKey(slug), items...).Result()
	if err != nil && err != redis.Nil {
		return nil, unavailable(op, err)
	}
	out := make(map[string]Claim, len(items))
	for i, v := range records {
		record, ok := v.(string)
		if !ok {
			continue
		}
		c, ok := parseClaimRecord(items[i], record)
		if !ok {
			e.logger.WarnContext(ctx, "unreadable claim record", "project", slug, "item", truncate(items[i], 200))
			continue
		}
		out[items[i]] = c
	}
	return out, nil
}
