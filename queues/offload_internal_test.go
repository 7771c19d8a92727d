package queues

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestRefillAfterASegmentMoveFollowsTheMove: a refill working from a list
// read before an operator moved the segment does not undo the move.
func TestRefillAfterASegmentMoveFollowsTheMove(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := NewEngine(b.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		above, seg := 2000, 1000
		_, err := e.CreateProject(ctx, "mv", SettingsPatch{OffloadAbove: &above, OffloadSegment: &seg})
		require.NoError(t, err)
		items := make([]QueueItem, 3000)
		for i := range items {
			items[i] = QueueItem{Name: fmt.Sprintf("m:%05d", i)}
		}
		_, err = e.Enqueue(ctx, "mv", Target{Queue: QueueTodo}, items)
		require.NoError(t, err)
		o := &Offloader{Engine: e, Dir: t.TempDir(), Node: "n"}
		require.NoError(t, o.RunOnce(ctx))
		segs, err := o.Segments(ctx, "mv") // the refill's snapshot
		require.NoError(t, err)
		require.NotEmpty(t, segs)
		_, err = o.MoveSegments(ctx, "mv", QueueTodo, QueueSecondary) // the operator
		require.NoError(t, err)
		_, err = o.refillSegment(ctx, "mv", segs[0]) // the stale refill
		require.NoError(t, err)
		c, err := e.Counts(ctx, "mv")
		require.NoError(t, err)
		require.EqualValues(t, 1000, c.Secondary)
		require.EqualValues(t, 2000, c.Todo)
	})
}

// TestOrphanCleanupNeverRemovesAFileThatTookTheNameMeanwhile replays the
// interleaving that lost live segments: cleanup lists a leftover file named
// like the next segment (old mtime), finds it unreferenced, and removes it
// by name; in between, an offload takes that id, records it, and renames
// its fresh segment over the leftover. The check now raises the id
// sequence past every id it found unreferenced, so the offload takes the
// next id and the removal can only hit the leftover.
func TestOrphanCleanupNeverRemovesAFileThatTookTheNameMeanwhile(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := NewEngine(b.Client, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		above, seg := 2000, 1000
		_, err := e.CreateProject(ctx, "orph", SettingsPatch{OffloadAbove: &above, OffloadSegment: &seg})
		require.NoError(t, err)
		dir := t.TempDir()
		o := &Offloader{Engine: e, Dir: dir, Node: "n", Protection: 2 * time.Hour} // RunOnce's own cleanup leaves the leftover to this test

		// A leftover of a crashed write, under the next segment's name.
		next, err := o.newSegmentID(ctx, "orph")
		require.NoError(t, err)
		segDir := filepath.Join(dir, "segments", "orph")
		require.NoError(t, os.MkdirAll(segDir, 0o755))
		leftover := filepath.Join(segDir, next+".gz")
		require.NoError(t, os.WriteFile(leftover, []byte("junk"), 0o644))
		old := time.Now().Add(-time.Hour)
		require.NoError(t, os.Chtimes(leftover, old, old))

		// Cleanup, first half: the leftover is unreferenced.
		orphans, err := o.unreferencedIDs(ctx, "orph", []string{next})
		require.NoError(t, err)
		require.True(t, orphans[next])

		// Meanwhile an offload writes a segment.
		items := make([]QueueItem, 3000)
		for i := range items {
			items[i] = QueueItem{Name: fmt.Sprintf("o:%05d", i)}
		}
		_, err = e.Enqueue(ctx, "orph", Target{Queue: QueueTodo}, items)
		require.NoError(t, err)
		require.NoError(t, o.RunOnce(ctx))
		segs, err := o.Segments(ctx, "orph")
		require.NoError(t, err)
		require.NotEmpty(t, segs)
		for _, s := range segs {
			require.NotEqual(t, next, s.ID, "an id found unreferenced is never handed out")
		}

		// Cleanup, second half: removal by name hits only the leftover.
		require.NoError(t, os.Remove(leftover))
		seen := map[string]int{}
		for range 100 {
			res, err := e.Claim(ctx, ClaimRequest{Project: "orph", Downloader: "alice", IP: "127.0.0.1", Count: 500})
			if CodeOf(err) == CodeNoItem {
				require.NoError(t, o.RunOnce(ctx))
				if res, err = e.Claim(ctx, ClaimRequest{Project: "orph", Downloader: "alice", IP: "127.0.0.1", Count: 500}); CodeOf(err) == CodeNoItem {
					break
				}
			}
			require.NoError(t, err)
			for _, it := range res.Items {
				seen[it.Name]++
			}
		}
		require.Len(t, seen, 3000, "every item came back from its segment")
	})
}
