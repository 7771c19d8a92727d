package queues_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestDoctorFindsWhatTheScriptsNoLongerCheck: a project in use has no
// problems; a key made the wrong type from outside, even one no claim has
// reached yet, and a budget field that is not an integer are named.
func TestDoctorFindsWhatTheScriptsNoLongerCheck(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		tb.enqueue(t, todo, "a", "b", "c")
		tb.enqueue(t, queues.Target{Queue: queues.QueueTodo, Downloader: "alice"}, "r")
		tb.claim(t, "bob", 1)
		_, err := tb.done("bob", "a")
		require.NoError(t, err)
		report, err := tb.engine.Doctor(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.Empty(t, report.Problems)
		require.Greater(t, report.KeysChecked, 30)

		require.NoError(t, tb.rdb.SAdd(tb.ctx, queues.QueueKey(tb.slug, queues.QueueBackfeed), "junk").Err())
		require.NoError(t, tb.rdb.HSet(tb.ctx, queues.BudgetKey(tb.slug), "carol", "lots").Err())
		require.NoError(t, tb.rdb.Set(tb.ctx, queues.ReservedQueueKey(tb.slug, "alice"), "x", 0).Err())
		report, err = tb.engine.Doctor(tb.ctx, tb.slug)
		require.NoError(t, err)
		require.ElementsMatch(t, []queues.KeyProblem{
			{Key: queues.QueueKey(tb.slug, queues.QueueBackfeed), Problem: "is a set, not a list"},
			{Key: queues.ReservedQueueKey(tb.slug, "alice"), Problem: "is a string, not a list"},
			{Key: queues.BudgetKey(tb.slug), Problem: "field carol is not an integer"},
		}, report.Problems)

		_, err = tb.engine.Doctor(tb.ctx, "nope")
		requireCode(t, err, queues.CodeProjectNotFound)
	})
}
