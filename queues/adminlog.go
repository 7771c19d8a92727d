package queues

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// AdminLogLength caps each admin log.
const AdminLogLength = 1000

// ChangeEntry records one operator change: who, when, what.
type ChangeEntry struct {
	At      time.Time       `json:"at"`
	By      string          `json:"by"`
	What    string          `json:"what"`
	Details json.RawMessage `json:"details,omitempty"`
	// Project names the project a change was about: AllChanges sets it
	// from the log it read the entry from; an entry of the global log
	// about one project (its deletion) stores it.
	Project string `json:"project,omitempty"`
}

// RecordChange appends an operator change to the project's admin log (""
// = the global log), keeping the newest AdminLogLength entries.
func (e *Engine) RecordChange(ctx context.Context, slug string, entry ChangeEntry) error {
	key := GlobalAdminLogKey
	if slug != "" {
		key = AdminLogKey(slug)
	}
	if entry.At.IsZero() {
		entry.At = e.clock.Now().UTC()
	}
	raw, _ := json.Marshal(entry)
	pipe := e.rdb.TxPipeline()
	pipe.LPush(ctx, key, raw)
	pipe.LTrim(ctx, key, 0, AdminLogLength-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("queues.RecordChange", err)
	}
	return nil
}

// Changes returns up to n of the newest entries of an admin log.
func (e *Engine) Changes(ctx context.Context, slug string, n int) ([]ChangeEntry, error) {
	key := GlobalAdminLogKey
	if slug != "" {
		if err := ValidateSlug(slug); err != nil {
			return nil, err
		}
		key = AdminLogKey(slug)
	}
	raw, err := e.rdb.LRange(ctx, key, 0, int64(n-1)).Result()
	if err != nil {
		return nil, unavailable("queues.Changes", err)
	}
	out := make([]ChangeEntry, 0, len(raw))
	for _, r := range raw {
		var entry ChangeEntry
		if json.Unmarshal([]byte(r), &entry) == nil {
			out = append(out, entry)
		}
	}
	return out, nil
}

// AllChanges returns up to n of the newest changes of every admin log, the
// global one and each project's, newest first, each entry naming its
// project. It reads the n newest of each log, in one pipeline.
func (e *Engine) AllChanges(ctx context.Context, n int) ([]ChangeEntry, error) {
	const op = "queues.AllChanges"
	slugs, err := e.Projects(ctx)
	if err != nil {
		return nil, err
	}
	pipe := e.rdb.Pipeline()
	global := pipe.LRange(ctx, GlobalAdminLogKey, 0, int64(n-1))
	perProject := make([]*redis.StringSliceCmd, len(slugs))
	for i, slug := range slugs {
		perProject[i] = pipe.LRange(ctx, AdminLogKey(slug), 0, int64(n-1))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, unavailable(op, err)
	}
	var out []ChangeEntry
	collect := func(slug string, raw []string) {
		for _, r := range raw {
			var entry ChangeEntry
			if json.Unmarshal([]byte(r), &entry) == nil {
				if slug != "" {
					entry.Project = slug
				}
				out = append(out, entry)
			}
		}
	}
	collect("", global.Val())
	for i, slug := range slugs {
		collect(slug, perProject[i].Val())
	}
	slices.SortStableFunc(out, func(a, b ChangeEntry) int { return b.At.Compare(a.At) })
	return out[:min(n, len(out))], nil
}
