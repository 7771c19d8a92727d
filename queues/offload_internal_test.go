package queues

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

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
