package queues

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/redis/go-redis/v9"
)

// DeleteResult says what a project deletion removed.
type DeleteResult struct {
	// Keys is how many Redis keys of the project were removed.
	Keys int `json:"keys"`
	// ClaimsOut is how many items warriors held when it was deleted
	// (their dones will get "no project").
	ClaimsOut int64 `json:"claims_out"`
}

// DeleteProject removes a project and every key it has: queues, claims,
// done and stats, Bloom filter, series, logs, segment index. With items
// out it refuses unless force is set, saying how many are out. The
// project's segment and archive files are the Offloader's to remove.
//
// The config goes first, in a transaction that re-checks out, so from
// then on every script answers "no project" and no claim can slip in
// between the check and the delete; the remaining keys are then found by
// SCAN over the project's hash tag on the node that holds its slot. The
// slug leaves the registry last: a deletion cut short is still listed and
// running it again finishes it. A project created under the same name
// while a deletion sweeps may lose keys to the sweep.
func (e *Engine) DeleteProject(ctx context.Context, slug string, force bool) (DeleteResult, error) {
	const op = "queues.DeleteProject"
	if err := ValidateSlug(slug); err != nil {
		return DeleteResult{}, err
	}
	listed, err := e.rdb.SIsMember(ctx, ProjectsKey, slug).Result()
	if err != nil {
		return DeleteResult{}, unavailable(op, err)
	}
	var result DeleteResult
	var configDel *redis.IntCmd
	errClaimsOut := errors.New("claims out")
	err = e.rdb.Watch(ctx, func(tx *redis.Tx) error {
		exists, err := tx.Exists(ctx, ConfigKey(slug)).Result()
		if err != nil {
			return err
		}
		if exists == 0 && !listed {
			return errorf(op, CodeProjectNotFound, "no project %q", slug)
		}
		if result.ClaimsOut, err = tx.ZCard(ctx, DeadlinesKey(slug)).Result(); err != nil {
			return err
		}
		// Items out in claim batches have no entry in deadlines.
		batched, err := tx.HGet(ctx, BatchesKey(slug), "out").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		result.ClaimsOut += batched
		if result.ClaimsOut > 0 && !force {
			return errClaimsOut
		}
		_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			configDel = pipe.Del(ctx, ConfigKey(slug))
			return nil
		})
		return err
	}, ConfigKey(slug), DeadlinesKey(slug), BatchesKey(slug))
	switch {
	case errors.Is(err, errClaimsOut):
		return result, errorf(op, CodeClaimsOut,
			"project %q has %d item(s) out with warriors; delete it anyway with force (their dones will be refused)", slug, result.ClaimsOut)
	case errors.Is(err, redis.TxFailedErr):
		return result, errorf(op, CodeClaimsOut, "project %q changed during the deletion (an item was claimed or completed); try again", slug)
	case err != nil:
		var qe *Error
		if errors.As(err, &qe) {
			return result, qe
		}
		return result, unavailable(op, err)
	}
	n, err := e.removeProjectKeys(ctx, slug)
	result.Keys = n + int(configDel.Val())
	if err != nil {
		return result, err
	}
	if err := e.rdb.SRem(ctx, ProjectsKey, slug).Err(); err != nil {
		return result, unavailable(op, err)
	}
	e.logger.InfoContext(ctx, "project deleted", "project", slug, "keys", result.Keys, "claims_out", result.ClaimsOut)
	return result, nil
}

// removeProjectKeys unlinks every key carrying the project's hash tag. In
// a cluster they all live on the master that owns the tag's slot, so only
// that node is scanned.
func (e *Engine) removeProjectKeys(ctx context.Context, slug string) (int, error) {
	const op = "queues.DeleteProject"
	node := redis.Cmdable(e.rdb)
	if cluster, ok := e.rdb.(*redis.ClusterClient); ok {
		master, err := cluster.MasterForKey(ctx, ConfigKey(slug))
		if err != nil {
			return 0, unavailable(op, err)
		}
		node = master
	}
	pattern := projectPrefix(slug) + "*"
	removed := 0
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return removed, unavailable(op, err)
		}
		if len(keys) > 0 {
			// The keys share one slot, so one UNLINK takes them all.
			n, err := e.rdb.Unlink(ctx, keys...).Result()
			if err != nil {
				return removed, unavailable(op, err)
			}
			removed += int(n)
		}
		if next == 0 {
			return removed, nil
		}
		cursor = next
	}
}

// RemoveProjectFiles removes a deleted project's segment and archive files
// from this frontend's data directory and says how many files went. Other
// frontends' data directories are theirs: their orphan cleanup removes
// segment files no record names once the protection window has passed.
func (o *Offloader) RemoveProjectFiles(ctx context.Context, slug string) (int, error) {
	if err := ValidateSlug(slug); err != nil {
		return 0, err
	}
	if o.Dir == "" {
		return 0, nil
	}
	removed := 0
	for _, archive := range []bool{false, true} {
		dir := o.segmentDir(slug, archive)
		files, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, err
		}
		if err := os.RemoveAll(dir); err != nil {
			return removed, err
		}
		removed += len(files)
	}
	if removed > 0 {
		o.logger().InfoContext(ctx, "project files removed", "project", slug, "files", removed)
	}
	return removed, nil
}
