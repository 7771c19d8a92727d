package queues

import (
	"context"
	"encoding/json"
	"time"
)

// AdminLogLength caps each admin log.
const AdminLogLength = 1000

// ChangeEntry records one operator change: who, when, what.
type ChangeEntry struct {
	At      time.Time       `json:"at"`
	By      string          `json:"by"`
	What    string          `json:"what"`
	Details json.RawMessage `json:"details,omitempty"`
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
