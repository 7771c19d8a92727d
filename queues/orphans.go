package queues

// Orphan cleanup: removing files no record references, without locks.

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// CleanupOrphans removes segment files and temporary files that no
// segment record references and whose timestamp of interest (mtime) is
// older than the protection window. A finished archive file (<id>.gz under
// archive/) is never an orphan: it has no record by design. It takes no
// lock: offload records a segment before writing its file and refill reads
// a file before forgetting it, so an unreferenced file is never needed
// again; the window keeps anything being worked on right now.
func (o *Offloader) CleanupOrphans(ctx context.Context) (int, error) {
	removed := 0
	cutoff := o.Engine.clock.Now().Add(-o.protection())
	for _, kind := range []string{"segments", "archive"} {
		projects, err := os.ReadDir(filepath.Join(o.Dir, kind))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return removed, err
		}
		for _, project := range projects {
			slug := project.Name()
			if !project.IsDir() || ValidateSlug(slug) != nil {
				continue
			}
			n, err := o.cleanupDir(ctx, slug, filepath.Join(o.Dir, kind, slug), kind == "archive", cutoff)
			removed += n
			o.orphansRemoved.Add(int64(n))
			if err != nil {
				return removed, err
			}
		}
	}
	return removed, nil
}

// orphanCheckBatch bounds the existence checks sent in one pipeline.
const orphanCheckBatch = 1000

// cleanupDir removes the orphans of one project directory, checking the
// candidates' records in pipelines rather than one round trip each.
func (o *Offloader) cleanupDir(ctx context.Context, slug, dir string, archive bool, cutoff time.Time) (int, error) {
	files, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	type candidate struct{ path, id string }
	var candidates []candidate
	for _, file := range files {
		if file.IsDir() {
			continue
		}
		// Only files named like segments are ours to remove.
		m := tmpFileName.FindStringSubmatch(file.Name())
		if m == nil && !archive {
			m = segmentFileName.FindStringSubmatch(file.Name())
		}
		if m == nil {
			continue
		}
		info, err := file.Info()
		if err != nil || !info.ModTime().Before(cutoff) {
			continue // gone already, or of recent interest
		}
		candidates = append(candidates, candidate{filepath.Join(dir, file.Name()), m[1]})
	}
	removed := 0
	for start := 0; start < len(candidates); start += orphanCheckBatch {
		batch := candidates[start:min(start+orphanCheckBatch, len(candidates))]
		ids := make([]string, len(batch))
		for i, c := range batch {
			ids[i] = c.id
		}
		orphans, err := o.unreferencedIDs(ctx, slug, ids)
		if err != nil {
			return removed, err
		}
		for _, c := range batch {
			if !orphans[c.id] {
				continue
			}
			// By name is safe: orphan_check raised seq past c.id, so no
			// offload can record that id and rename a live file here.
			if err := os.Remove(c.path); err == nil {
				removed++
				o.logger().Info("removed orphaned segment file", "path", c.path)
			}
		}
	}
	return removed, nil
}

// unreferencedIDs returns which of ids have no segment record, and makes
// sure none of them can get one later (orphan_check.lua).
func (o *Offloader) unreferencedIDs(ctx context.Context, slug string, ids []string) (map[string]bool, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	reply, err := o.Engine.runScript(ctx, "queues.CleanupOrphans", orphanCheckScript, []string{SegmentsKey(slug), OffloadKey(slug)}, args...)
	if err != nil {
		return nil, err
	}
	list, _ := reply.([]any)
	orphans := make(map[string]bool, len(list))
	for _, id := range list {
		orphans[replyString(id)] = true
	}
	return orphans, nil
}
