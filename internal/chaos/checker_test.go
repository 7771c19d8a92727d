package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/queues"
)

// everysecWindow is the documented loss window of appendfsync everysec
// (docs/durability.md): about 1 s of acknowledged writes, 2 s in the
// worst case. An acknowledged done lost by a Redis kill is excused only
// when it was acknowledged at most this long before the kill.
const everysecWindow = 2 * time.Second

// placement is where the checker found items, read from Redis directly
// with the engine's key builders, not through hoard.
type placement struct {
	// places maps an item to every place it was found, once per copy.
	places map[string][]string
	todo   int
	out    int
	done   int
	failed int
}

// readPlacement reads every todo queue (shared, reserved and scored),
// out, done and failed of the project.
func readPlacement(ctx context.Context, rdb redis.UniversalClient, slug string) (placement, error) {
	p := placement{places: map[string][]string{}}
	add := func(place string, items []string) {
		for _, item := range items {
			p.places[item] = append(p.places[item], place)
		}
	}
	for _, q := range queues.SharedQueues {
		items, err := rdb.LRange(ctx, queues.QueueKey(slug, q), 0, -1).Result()
		if err != nil {
			return p, fmt.Errorf("read %s: %w", q, err)
		}
		add(string(q), items)
		p.todo += len(items)
	}
	downloaders, err := rdb.SMembers(ctx, queues.ReservedSetKey(slug)).Result()
	if err != nil {
		return p, err
	}
	for _, d := range downloaders {
		items, err := rdb.LRange(ctx, queues.ReservedQueueKey(slug, d), 0, -1).Result()
		if err != nil {
			return p, err
		}
		add("todo:d:"+d, items)
		p.todo += len(items)
	}
	scored, err := rdb.ZRange(ctx, queues.QueueKey(slug, queues.QueueScored), 0, -1).Result()
	if err != nil {
		return p, err
	}
	add(string(queues.QueueScored), scored)
	p.todo += len(scored)
	out, err := rdb.ZRange(ctx, queues.DeadlinesKey(slug), 0, -1).Result()
	if err != nil {
		return p, err
	}
	// Items out in a claim batch have their batch's deadline (its record
	// names them; each item's claim record names its batch).
	ids, err := rdb.ZRange(ctx, queues.BatchDeadlinesKey(slug), 0, -1).Result()
	if err != nil {
		return p, err
	}
	if len(ids) > 0 {
		claims, err := rdb.HGetAll(ctx, queues.ClaimsKey(slug)).Result()
		if err != nil {
			return p, err
		}
		for _, id := range ids {
			value, err := rdb.HGet(ctx, queues.BatchesKey(slug), "i"+id).Result()
			if err != nil {
				return p, fmt.Errorf("claim batch %s: %w", id, err)
			}
			lines := strings.Split(value, "\n")
			for _, item := range lines[1:] {
				if claims[item] == strings.TrimSuffix(lines[0], "- -")+"#"+id+" -" {
					out = append(out, item)
				}
			}
		}
	}
	add("out", out)
	p.out = len(out)
	done, err := rdb.SMembers(ctx, queues.DoneKey(slug)).Result()
	if err != nil {
		return p, err
	}
	add("done", done)
	p.done = len(done)
	failed, err := rdb.HKeys(ctx, queues.FailedKey(slug)).Result()
	if err != nil {
		return p, err
	}
	add("failed", failed)
	p.failed = len(failed)
	return p, nil
}

// report is the verdict of a run.
type report struct {
	Items  int
	Todo   int
	Out    int // stranded claims, once every warrior finished
	Done   int
	Failed int // claimed max_claims times, or reported failed
	// FailedByExpiry are the failed items that reached max_claims with
	// every claim ended by its expiry (none released or reported).
	FailedByExpiry int
	Lost           []string // known items found nowhere
	Duplicated     []string // items found in more than one place or twice in one
	Unknown        []string // items found that were never queued
	// AckedLostInWindow are acknowledged dones a Redis kill took back,
	// acknowledged within everysecWindow before it: the documented cost of
	// everysec. AckedLostOutside are the rest, which nothing excuses.
	AckedLostInWindow []string
	AckedLostOutside  []string
	// AckedNotDoneAtEnd are acknowledged dones not in done at the end.
	AckedNotDoneAtEnd []string
	Kills             []killRecord
	Problems          []string // kills that did not recover, and the like
}

// failures lists every reason the run fails; none means it passed.
func (r *report) failures() []string {
	var fails []string
	if len(r.Lost) > 0 {
		fails = append(fails, fmt.Sprintf("%d items lost: %v", len(r.Lost), firstFew(r.Lost)))
	}
	if len(r.Duplicated) > 0 {
		fails = append(fails, fmt.Sprintf("%d items duplicated: %v", len(r.Duplicated), firstFew(r.Duplicated)))
	}
	if len(r.Unknown) > 0 {
		fails = append(fails, fmt.Sprintf("%d unknown items: %v", len(r.Unknown), firstFew(r.Unknown)))
	}
	if len(r.AckedLostOutside) > 0 {
		fails = append(fails, fmt.Sprintf("%d acknowledged dones lost outside the %s everysec window: %v",
			len(r.AckedLostOutside), everysecWindow, firstFew(r.AckedLostOutside)))
	}
	if len(r.AckedNotDoneAtEnd) > 0 {
		fails = append(fails, fmt.Sprintf("%d acknowledged dones not done at the end: %v", len(r.AckedNotDoneAtEnd), firstFew(r.AckedNotDoneAtEnd)))
	}
	if r.Out > 0 {
		fails = append(fails, fmt.Sprintf("%d claims stranded in out after every warrior finished", r.Out))
	}
	if r.Todo > 0 {
		fails = append(fails, fmt.Sprintf("%d items still waiting after the drain", r.Todo))
	}
	return append(fails, r.Problems...)
}

func firstFew(items []string) []string {
	if len(items) > 10 {
		return append(slices.Clone(items[:10]), "…")
	}
	return items
}

// check compares Redis with the items queued and the dones acknowledged.
func check(ctx context.Context, rdb redis.UniversalClient, slug string, items []string, acked map[string]time.Time, r *report) error {
	p, err := readPlacement(ctx, rdb, slug)
	if err != nil {
		return err
	}
	r.Items, r.Todo, r.Out, r.Done, r.Failed = len(items), p.todo, p.out, p.done, p.failed
	if r.FailedByExpiry, err = failedByExpiry(ctx, rdb, slug); err != nil {
		return err
	}
	r.Lost, r.Duplicated, r.Unknown, r.AckedNotDoneAtEnd = nil, nil, nil, nil
	known := make(map[string]bool, len(items))
	for _, item := range items {
		known[item] = true
		switch places := p.places[item]; {
		case len(places) == 0:
			r.Lost = append(r.Lost, item)
		case len(places) > 1:
			r.Duplicated = append(r.Duplicated, item+" in "+strings.Join(places, ","))
		}
	}
	for item := range p.places {
		if !known[item] {
			r.Unknown = append(r.Unknown, item)
		}
	}
	for item := range acked {
		if !slices.Contains(p.places[item], "done") {
			r.AckedNotDoneAtEnd = append(r.AckedNotDoneAtEnd, item)
		}
	}
	slices.Sort(r.Unknown)
	slices.Sort(r.AckedNotDoneAtEnd)
	return nil
}

// checkAckedAfterRedisKill is run as soon as a killed Redis answers
// again: every done acknowledged before the kill must still be in done,
// unless it was acknowledged inside the everysec window. Items counted
// once are not counted again by a later kill.
func checkAckedAfterRedisKill(ctx context.Context, rdb redis.UniversalClient, slug string, killedAt time.Time,
	acked map[string]time.Time, counted map[string]bool, r *report) error {
	names := make([]string, 0, len(acked))
	for item := range acked {
		if !counted[item] {
			names = append(names, item)
		}
	}
	for start := 0; start < len(names); start += 10000 {
		batch := names[start:min(start+10000, len(names))]
		members := make([]any, len(batch))
		for i, item := range batch {
			members[i] = item
		}
		in, err := rdb.SMIsMember(ctx, queues.DoneKey(slug), members...).Result()
		if err != nil {
			return err
		}
		for i, isDone := range in {
			if isDone {
				continue
			}
			item := batch[i]
			counted[item] = true
			if killedAt.Sub(acked[item]) <= everysecWindow {
				r.AckedLostInWindow = append(r.AckedLostInWindow, item)
			} else {
				r.AckedLostOutside = append(r.AckedLostOutside, item)
			}
		}
	}
	return nil
}

// failedByExpiry counts the failed items whose claims all ended by expiry
// and that failed at max_claims, read through the engine's own listing.
func failedByExpiry(ctx context.Context, rdb redis.UniversalClient, slug string) (int, error) {
	engine := queues.NewEngine(rdb, queues.Options{})
	expired := map[string]bool{} // a scan may list an item twice
	var cursor uint64
	for {
		page, next, err := engine.FailedItems(ctx, slug, cursor, queues.MaxFailedPage)
		if err != nil {
			return 0, err
		}
		for _, f := range page {
			byExpiry := f.Reason == queues.FailedMaxClaims && len(f.History) == maxClaims
			for _, end := range f.History {
				byExpiry = byExpiry && end.Ended == "expired"
			}
			if byExpiry {
				expired[f.Item] = true
			}
		}
		if cursor = next; cursor == 0 {
			return len(expired), nil
		}
	}
}
