package queues_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestMovePreviewCountsWhatMoveTakes: a preview counts the items a move
// with the same request takes (pattern, count, limit groups' sub-queues,
// more than a page of items), changes nothing, and refuses what Move
// refuses.
func TestMovePreviewCountsWhatMoveTakes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		names := make([]string, 0, 2600)
		for i := range 1300 {
			names = append(names, fmt.Sprintf("a:%d", i), fmt.Sprintf("b:%d", i))
		}
		tb.enqueue(t, todo, names...)
		_, err := tb.engine.UpdateLimitGroups(tb.ctx, tb.slug, []queues.LimitGroup{{Name: "bs", Type: "b", RatePerMinute: 60, Burst: 1}})
		require.NoError(t, err)
		_, err = tb.engine.Reroute(tb.ctx, tb.slug)
		require.NoError(t, err)
		before := tb.counts(t)

		for _, req := range []queues.MoveRequest{
			{From: "todo", To: "secondary", Match: &queues.LimitGroup{Glob: "a:1*"}},
			{From: "todo", To: "secondary", Match: &queues.LimitGroup{Type: "b"}, Count: 1100},
			{From: "todo", To: "redo", Match: &queues.LimitGroup{Regex: `^b:12\d\d$`}},
		} {
			preview, err := tb.engine.MovePreview(tb.ctx, tb.slug, req)
			require.NoError(t, err)
			require.Equal(t, before, tb.counts(t), "a preview moves nothing")
			moved, err := tb.engine.Move(tb.ctx, tb.slug, req)
			require.NoError(t, err)
			require.Positive(t, moved.Moved)
			require.Equal(t, moved.Moved, preview.Moved, "%+v", req)
			before = tb.counts(t)
		}
		_, err = tb.engine.MovePreview(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "todo"})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.MovePreview(tb.ctx, tb.slug, queues.MoveRequest{From: "todo", To: "secondary", Match: &queues.LimitGroup{Regex: "("}})
		requireCode(t, err, queues.CodeInvalid)
		_, err = tb.engine.MovePreview(tb.ctx, "nosuch", queues.MoveRequest{From: "todo", To: "secondary"})
		requireCode(t, err, queues.CodeProjectNotFound)
	})
}
