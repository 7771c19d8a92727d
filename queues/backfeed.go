package queues

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bits-and-blooms/bloom/v3"
)

// BloomParameters gives a filter generation's size in bits (m) and hash
// count (k) for capacity items at false-positive rate fp.
func BloomParameters(capacity int, fp float64) (m, k uint) {
	return bloom.EstimateParameters(uint(capacity), fp)
}

// bloomLocations are an item's k bit locations in a filter of m bits,
// computed with bits-and-blooms/bloom/v3 so every frontend agrees.
func bloomLocations(item string, m, k uint) []uint64 {
	locations := bloom.Locations([]byte(item), k)
	for i := range locations {
		locations[i] %= uint64(m)
	}
	return locations
}

// BackfeedResult counts one backfeed batch.
type BackfeedResult struct {
	Received  int `json:"received"`
	New       int `json:"new"`
	Duplicate int `json:"duplicate"`
	Rejected  int `json:"rejected"`
	// Of the duplicates: out, done, released or failed (Placed), waiting
	// in a queue already (Waiting); the rest were in the filter. A backfeed
	// looks up the places only for items the filter has not seen (so
	// counts those alone), EnqueueRegistered for every item. Not on the
	// backfeed wire, whose reply format is fixed.
	Placed  int `json:"-"`
	Waiting int `json:"-"`
	// Filtered counts the items dropped by the project's filters (not
	// on the backfeed wire either).
	Filtered int `json:"-"`
}

// MaxBloomBatch is the most items one filter script takes; with a
// generation capacity of at least this many, a batch starts at most one
// new generation.
const MaxBloomBatch = 1000

// bloomScriptBudget is the work one bloom_add.lua call may do, in bits an
// item can touch: Redis runs nothing else while a script runs, so every
// warrior waits for it. An item reads at most k bits in each of the G
// generations and sets k in the newest (or in G+1 when it starts), so it
// costs the sum of k over generations 1..G+1, plus bloomItemOverhead.
// Measured on redis-server 7.0 (BenchmarkBloomAddScript,
// docs/warrior-api.md, "Backfeed"), a new item costs about 19 us with the
// default classic filter (k = 20); one 1,000-item call took 31-64 ms. With
// two calls in flight (bloomScriptsInFlight) a warrior waits behind up to
// two, so each is half what one could be: 2,048 is 64 items of the
// default three-word blocked shape (85 of a two-word one, bloom_words 2,
// whose call takes slightly less: ~4.9M Redis instructions against ~5.4M,
// callgrind; 73 of a classic one), and beat 4,096 with one
// call in flight both for new items/s and for the warriors beside them
// (docs/warrior-api.md, "Backfeed").
var bloomScriptBudget = 2048

// bloomItemOverhead is an item's cost besides its bits, in bits: its share
// of the four bulk look-ups (out, done, released, recently done), its push,
// and the Lua around them.
const bloomItemOverhead = 8

// bloomBatchSize is how many items one script takes when each needs
// bitsPerItem bits: within bloomScriptBudget, at least one, at most
// MaxBloomBatch.
func bloomBatchSize(bitsPerItem int) int {
	return max(1, min(MaxBloomBatch, bloomScriptBudget/(bitsPerItem+bloomItemOverhead)))
}

// bloomScriptsInFlight is how many bloom_add.lua calls one engine (one
// frontend) has in Redis at once. Redis runs one command at a time, taking
// clients in turn: when every backfeed request had its script in flight, a
// warrior's claim or done queued behind one script per concurrent request
// (8 senders: warrior p99 65.8 ms beside them against 8.6 quiet, in `make
// bench`). Taking turns, it waits behind at most this many per frontend.
// Two, not one: while one runs the next is already waiting in Redis, so
// Redis does not idle for a frontend's round trip between calls.
const bloomScriptsInFlight = 2

// bloomTurn waits for a turn to run bloom_add.lua, or for ctx; release
// gives the turn back.
func (e *Engine) bloomTurn(ctx context.Context, op string) (release func(), err error) {
	select {
	case e.bloomTurns <- struct{}{}:
		return func() { <-e.bloomTurns }, nil
	case <-ctx.Done():
		return nil, unavailable(op, fmt.Errorf("waiting for a turn to run the Bloom filter's script: %w", context.Cause(ctx)))
	}
}

// ErrBadSecret is the cause of a refused backfeed.
var ErrBadSecret = errors.New("wrong backfeed secret")

// Backfeed queues items grab scripts discovered into todo:backfeed (and its
// limit groups' sub-queues), skipping every item the project's Bloom filter
// has seen. secret must match the project's backfeed_secret.
func (e *Engine) Backfeed(ctx context.Context, slug, secret string, items []string) (BackfeedResult, error) {
	if secret == "" {
		return BackfeedResult{}, &Error{Op: "queues.Backfeed", Code: CodeBlocked, Message: "wrong backfeed secret", Err: ErrBadSecret}
	}
	return e.bloomAdd(ctx, slug, secret, QueueBackfeed, items)
}

// CheckBackfeedSecret says whether secret is the project's backfeed secret,
// before a frontend spends anything on the request's body. The comparison
// takes the same time however much of the secret matches. bloom_add.lua
// checks again, atomically with the push.
func (e *Engine) CheckBackfeedSecret(ctx context.Context, slug, secret string) error {
	const op = "queues.CheckBackfeedSecret"
	if ValidateSlug(slug) != nil {
		return errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	fields, err := e.rdb.HMGet(ctx, ConfigKey(slug), "created_at", "backfeed_secret").Result()
	if err != nil {
		return unavailable(op, err)
	}
	if fields[0] == nil {
		return errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	stored, _ := fields[1].(string)
	want, got := sha256.Sum256([]byte(stored)), sha256.Sum256([]byte(secret))
	if stored == "" || secret == "" || subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		return &Error{Op: op, Code: CodeBlocked, Message: "wrong backfeed secret, or backfeed is off for this project", Err: ErrBadSecret}
	}
	return nil
}

// secretDigest is what bloom_add.lua gets instead of the backfeed secret,
// which an argument would show in SLOWLOG and MONITOR: a fresh random salt
// and sha1hex(salt + secret) (SHA-1 because it is the one digest Redis
// Lua has). The script recomputes the digest from the
// stored secret, so the check stays atomic with the push, and a digest
// seen in SLOWLOG matches nothing but its own salt.
func secretDigest(secret string) (salt, digest string) {
	raw := make([]byte, 16)
	_, _ = rand.Read(raw) // crypto/rand.Read never fails (Go 1.24+)
	salt = hex.EncodeToString(raw)
	sum := sha1.Sum([]byte(salt + secret))
	return salt, hex.EncodeToString(sum[:])
}

// EnqueueRegistered queues items like Enqueue, and registers them in the
// Bloom filter, so backfeed never queues them again; items the filter has
// seen are skipped.
func (e *Engine) EnqueueRegistered(ctx context.Context, slug string, q Queue, items []string) (BackfeedResult, error) {
	return e.bloomAdd(ctx, slug, "", q, items)
}

// bloomShape is one filter generation's shape: m bits, k hashes, and the
// items it takes before the next generation starts. A classic generation
// (words 0) sets k bits anywhere in its m; a blocked one (bloomblocked.go)
// sets k bits in each of `words` 32-bit words. Generations created before
// blocked ones existed are classic, and stay so. A sets generation
// (buckets > 0, bloomsets.go) has no bits: it keeps each item's 32-bit
// fingerprint in one of `buckets` Redis sets.
type bloomShape struct {
	m, k     uint
	capacity int
	words    uint
	buckets  uint64
}

// String is the shape as meta's `shapes` records it: "m:k:cap" for a
// classic generation, "m:k:cap:w<words>" for a blocked one (which a build
// from before blocked generations refuses to parse, so it writes nothing),
// "s<buckets>:cap" for a sets one (which every build before sets refuses
// to parse, blocked or classic, so it writes nothing either).
func (s bloomShape) String() string {
	if s.buckets > 0 {
		return "s" + strconv.FormatUint(s.buckets, 10) + ":" + strconv.Itoa(s.capacity)
	}
	text := strconv.FormatUint(uint64(s.m), 10) + ":" + strconv.FormatUint(uint64(s.k), 10) + ":" + strconv.Itoa(s.capacity)
	if s.words > 0 {
		text += ":w" + strconv.FormatUint(uint64(s.words), 10)
	}
	return text
}

// cost is what an item costs bloom_add.lua in this generation, in the units
// of bloomScriptBudget: a classic generation's k bits, a blocked one's
// words at blockedWordCost each.
func (s bloomShape) cost() int {
	if s.buckets > 0 {
		return setsGenerationCost
	}
	if s.words > 0 {
		return int(s.words) * blockedWordCost
	}
	return int(s.k)
}

// blockedWordCost is a blocked word's cost in bloomScriptBudget's units:
// a word costs less than that inside Redis (its read and write are 7
// arguments of batch-wide BITFIELDs; a new item in the default 3-word shape
// took 7.6 µs of EVALSHA against a classic 20-bit item's 28.5, side by side
// at load 25), but at 8 a call takes 64 items of the default 3-word
// shape (85 of a 2-word one), as many as two calls in flight
// (bloomScriptsInFlight) should hold a warrior behind them, and the call's
// fixed part is small beside them (~2k of the ~85k Redis instructions per
// new item, callgrind).
const blockedWordCost = 8

// argsPerItem is how many script arguments an item carries for this
// generation: its k bit locations, or one string naming its words
// (blockedBatch.item), or none for a sets generation (whose member the
// item carries once for all of them, and whose bucket is a key).
func (s bloomShape) argsPerItem() int {
	if s.buckets > 0 {
		return 0
	}
	if s.words > 0 {
		return 1
	}
	return int(s.k)
}

// appendBloomBatch appends a batch to bloom_add.lua's arguments: the item
// count; per item its name, its target (1-based; only when there are
// several targets, target non-nil), its sets member (only when a
// generation of shapes is a sets one) and, for each other generation of
// shapes, its locations (a classic generation's k bit locations, a blocked
// one's word references); then each blocked generation's words. members
// holds each item's sets member (appendBucketKeys), nil without a sets
// generation.
func appendBloomBatch(args []any, shapes []bloomShape, items []string, members []string, target func(item string) int) []any {
	blocked := make([]*blockedBatch, len(shapes))
	for g, shape := range shapes {
		if shape.words > 0 {
			blocked[g] = newBlockedBatch(shape, len(items))
		}
	}
	args = append(args, len(items))
	for i, item := range items {
		args = append(args, item)
		if target != nil {
			args = append(args, target(item))
		}
		if members != nil {
			args = append(args, members[i])
		}
		for g, shape := range shapes {
			if shape.buckets > 0 {
				continue
			}
			if blocked[g] != nil {
				args = append(args, blocked[g].item(item))
				continue
			}
			for _, loc := range bloomLocations(item, shape.m, shape.k) {
				args = append(args, loc)
			}
		}
	}
	for _, batch := range blocked {
		if batch != nil {
			args = batch.appendWords(args)
		}
	}
	return args
}

// appendBucketKeys appends bloom_add.lua's bucket keys for a batch: per
// item, for each sets generation of shapes (generation g+1 for shapes[g]),
// the bucket the item's fingerprint falls in. The script passes them to
// SISMEMBER and SADD; Redis Cluster sees every key it touches, all in the
// project's slot. It also returns each item's sets member, from the same
// hash (nil when no generation of shapes is a sets one), for
// appendBloomBatch.
func appendBucketKeys(keys []string, slug string, shapes []bloomShape, items []string) ([]string, []string) {
	if !slices.ContainsFunc(shapes, func(s bloomShape) bool { return s.buckets > 0 }) {
		return keys, nil
	}
	members := make([]string, len(items))
	for i, item := range items {
		high, member := setsHash(item)
		members[i] = member
		for g, shape := range shapes {
			if shape.buckets > 0 {
				keys = append(keys, BloomBucketKey(slug, g+1, setsBucket(high, shape.buckets)))
			}
		}
	}
	return keys, members
}

// MaxBloomGenerationBits is the largest generation: a Redis string holds at
// most 2^32 bits (512 MiB), and SETBIT refuses offsets beyond it.
const MaxBloomGenerationBits = 1 << 32

// newBloomShape sizes a new generation (blocked) for capacity items at
// false-positive rate fp with `words` words per item (0 = automatic),
// refusing one Redis cannot hold.
func newBloomShape(capacity int, fp float64, words int) (bloomShape, error) {
	shape := newBlockedShape(capacity, fp, uint(words))
	if shape.m == 0 || uint64(shape.m) > MaxBloomGenerationBits {
		return bloomShape{}, fmt.Errorf("a generation of %d items at false-positive rate %g needs %d MiB of bits, above Redis's 512 MiB string limit; lower bloom_capacity (full generations chain)",
			capacity, fp, (uint64(shape.m)+(8<<20)-1)/(8<<20))
	}
	return shape, nil
}

// newGenerationShape sizes the generation a project's settings start now:
// bloom_kind picks a blocked or a sets generation.
func newGenerationShape(kind string, capacity int, fp float64, words int) (bloomShape, error) {
	if kind == BloomKindSets {
		return newSetsShape(capacity, fp)
	}
	return newBloomShape(capacity, fp, words)
}

// BloomShape describes the (blocked) generation a project's settings start
// now, as meta's `shapes` records it (see bloomShape.String), or why there
// is none; words is bloom_words (0 = automatic).
func BloomShape(capacity int, fp float64, words int) (string, error) {
	return BloomShapeOf(BloomKindBlocked, capacity, fp, words)
}

// BloomShapeOf is BloomShape for a generation of bloom_kind kind.
func BloomShapeOf(kind string, capacity int, fp float64, words int) (string, error) {
	shape, err := newGenerationShape(kind, capacity, fp, words)
	if err != nil {
		return "", err
	}
	return shape.String(), nil
}

// parseBloomShapes reads meta's "m:k:cap,..." list.
func parseBloomShapes(text string) ([]bloomShape, error) {
	if text == "" {
		return nil, nil
	}
	var shapes []bloomShape
	for _, part := range strings.Split(text, ",") {
		fields := strings.Split(part, ":")
		if len(fields) == 2 && strings.HasPrefix(fields[0], "s") {
			buckets, errB := strconv.ParseUint(fields[0][1:], 10, 64)
			capacity, errC := strconv.Atoi(fields[1])
			if errB != nil || errC != nil || buckets == 0 || capacity <= 0 {
				return nil, fmt.Errorf("bad generation shape %q", part)
			}
			shapes = append(shapes, bloomShape{capacity: capacity, buckets: buckets})
			continue
		}
		var words uint64
		if len(fields) == 4 && strings.HasPrefix(fields[3], "w") {
			var err error
			if words, err = strconv.ParseUint(fields[3][1:], 10, 8); err != nil || words == 0 || words > 8 {
				return nil, fmt.Errorf("bad generation shape %q", part)
			}
			fields = fields[:3]
		}
		if len(fields) != 3 {
			return nil, fmt.Errorf("bad generation shape %q", part)
		}
		m, errM := strconv.ParseUint(fields[0], 10, 64)
		k, errK := strconv.ParseUint(fields[1], 10, 32)
		capacity, errC := strconv.Atoi(fields[2])
		if errM != nil || errK != nil || errC != nil || m == 0 || m > MaxBloomGenerationBits || k == 0 || k > 64 || capacity <= 0 ||
			(words > 0 && (m%blockedWordBits != 0 || k > blockedWordBits)) {
			return nil, fmt.Errorf("bad generation shape %q", part)
		}
		shapes = append(shapes, bloomShape{m: uint(m), k: uint(k), capacity: capacity, words: uint(words)})
	}
	return shapes, nil
}

// readBloomShapes returns the shapes of the filter's existing generations
// and how many items the newest holds. A filter written before shapes were
// recorded has one m and k for every generation and the project's current
// capacity, exactly as bloom_add.lua migrates it.
func (e *Engine) readBloomShapes(ctx context.Context, slug string, capacity int) ([]bloomShape, int, error) {
	meta, err := e.rdb.HMGet(ctx, BloomMetaKey(slug), "gens", "shapes", "m", "k", "count").Result()
	if err != nil {
		return nil, 0, err
	}
	countText, _ := meta[4].(string)
	count, _ := strconv.Atoi(countText)
	text, _ := meta[1].(string)
	if m, ok := meta[2].(string); ok && text == "" {
		k, _ := meta[3].(string)
		gens, _ := meta[0].(string)
		n, _ := strconv.Atoi(gens)
		one := m + ":" + k + ":" + strconv.Itoa(capacity)
		text = strings.TrimSuffix(strings.Repeat(one+",", n), ",")
	}
	shapes, err := parseBloomShapes(text)
	if err != nil {
		return nil, 0, fmt.Errorf("the Bloom filter's metadata (%s) is damaged: %w", BloomMetaKey(slug), err)
	}
	return shapes, count, nil
}

// maxBloomRetries bounds how often one batch re-reads a filter or limit
// groups another frontend changed under it.
const maxBloomRetries = 8

func (e *Engine) bloomAdd(ctx context.Context, slug, secret string, q Queue, items []string) (BackfeedResult, error) {
	const op = "queues.bloomAdd"
	if err := ValidateSlug(slug); err != nil {
		return BackfeedResult{}, errorf(op, CodeProjectNotFound, "no project %q", slug)
	}
	project, err := e.Project(ctx, slug)
	if err != nil {
		return BackfeedResult{}, err
	}
	result := BackfeedResult{Received: len(items)}
	valid := make([]string, 0, len(items))
	for _, item := range items {
		if ValidateNewItem(item) != nil {
			result.Rejected++
			continue
		}
		valid = append(valid, item)
	}
	next, err := newGenerationShape(project.BloomKind, project.BloomCapacity, project.BloomFPRate, project.BloomWords)
	if err != nil {
		return result, errorf(op, CodeInvalid, "%v", err)
	}
	shapes, count, err := e.readBloomShapes(ctx, slug, project.BloomCapacity)
	if err != nil {
		return result, unavailable(op, err)
	}
	state, err := e.limitGroups(ctx, slug, false)
	if err != nil {
		return result, err
	}
	salt, digest := "", ""
	if secret != "" {
		salt, digest = secretDigest(secret)
	}
	retries := 0
	for start := 0; start < len(valid); {
		gens := len(shapes)
		// The next generation's bit locations go with the batch only when
		// the batch may start it (no generation yet, or the newest could
		// fill up): otherwise they would be half of every item's arguments,
		// unused. The script refuses a batch that needs them and lacks
		// them (the count moved on in another frontend): re-read, retry.
		cost := 0
		for _, shape := range shapes {
			cost += shape.cost()
		}
		batch := valid[start:min(start+bloomBatchSize(cost), len(valid))]
		passed := shapes
		if gens == 0 || count+len(batch) > shapes[gens-1].capacity {
			passed = append(slices.Clip(shapes), next)
			batch = valid[start:min(start+bloomBatchSize(cost+next.cost()), len(valid))]
		}
		withNext := len(passed) > gens
		// Filtered items are dropped here, against this frontend's copy of
		// the filters; the script refuses the batch if the copy is stale.
		kept := make([]string, 0, len(batch))
		for _, item := range batch {
			if !state.filtered(item) {
				kept = append(kept, item)
			}
		}
		filtered := len(batch) - len(kept)
		keys := []string{ConfigKey(slug), BloomMetaKey(slug), StatsKey(slug), ClaimsKey(slug), DoneKey(slug), ReleasedKey(slug), RecentDoneKey(slug)}
		for g := 1; g <= gens+1; g++ {
			keys = append(keys, BloomKey(slug, g))
		}
		keys, members := appendBucketKeys(keys, slug, passed, kept)
		keys = append(keys, QueueKey(slug, q))
		for _, g := range state.groups {
			keys = append(keys, GroupQueueKey(slug, q, g.Name))
		}
		keys = append(keys, FailedKey(slug), QueuedKey(slug))
		known := make([]string, gens)
		perItem := 3
		for g, shape := range passed {
			if g < gens {
				known[g] = shape.String()
			}
			perItem += shape.argsPerItem()
		}
		nextText := ""
		if withNext {
			nextText = next.String()
		}
		args := make([]any, 0, 9+len(kept)*perItem+len(kept)*3*8)
		args = append(args, salt, digest, gens, strings.Join(known, ","), nextText, state.version, state.filtersVersion, filtered)
		var target func(string) int
		if len(state.groups) > 0 {
			target = func(item string) int { return groupFor(state.groups, item) + 2 }
		}
		args = appendBloomBatch(args, passed, kept, members, target)
		release, err := e.bloomTurn(ctx, op)
		if err != nil {
			return result, err
		}
		code, rest, err := e.runScriptList(ctx, op, bloomAddScript, keys, args...)
		release()
		if err != nil {
			return result, err
		}
		switch code {
		case codeNoProject:
			return result, errorf(op, CodeProjectNotFound, "no project %q", slug)
		case codeBadSecret:
			return result, &Error{Op: op, Code: CodeBlocked, Message: "wrong backfeed secret, or backfeed is off for this project", Err: ErrBadSecret}
		case codeStaleFilter, codeStaleGroups:
			// Another frontend started a generation or changed the limit
			// groups or filters: re-read, a bounded number of times.
			if retries++; retries > maxBloomRetries {
				return result, unavailable(op, fmt.Errorf("the Bloom filter, limit groups or filters kept changing during %d attempts", maxBloomRetries))
			}
			if code == codeStaleFilter {
				if shapes, count, err = e.readBloomShapes(ctx, slug, project.BloomCapacity); err != nil {
					return result, unavailable(op, err)
				}
			} else if state, err = e.limitGroups(ctx, slug, true); err != nil {
				return result, err
			}
			continue
		}
		retries = 0
		result.Filtered += filtered
		result.New += int(code)
		result.Duplicate += int(replyInt(rest[0]))
		if len(rest) >= 4 {
			result.Placed += int(replyInt(rest[2]))
			result.Waiting += int(replyInt(rest[3]))
		}
		if int(replyInt(rest[1])) > gens {
			shapes = passed
		}
		if len(rest) >= 5 {
			count = int(replyInt(rest[4]))
		}
		start += len(batch)
	}
	return result, nil
}
