package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
	"github.com/hoardproject/hoard/queues"
)

// TestBothClientsAgreeAgainstARealHoard: the raw client and net/http's,
// each kept alive and with a new connection per call, one item and seven
// per request, drain the same queue of a real hoard (names with JSON's
// escapes, non-ASCII and astral characters included) and count the same
// round trips and items as the server counts done.
func TestBothClientsAgreeAgainstARealHoard(t *testing.T) {
	unittier.Skip(t, "it runs a redis-server and a hoard server")
	ctx := context.Background()
	env, err := startBenchEnv(ctx, benchOptions{})
	require.NoError(t, err)
	t.Cleanup(env.stop)
	const items = 150
	names := func(slug string) []queues.QueueItem {
		batch := make([]queues.QueueItem, items)
		for i := range batch {
			batch[i].Name = fmt.Sprintf("%s/%d \"quoted\" back\\slash é 😀 \t/", slug, i)
		}
		return batch
	}
	n := 0
	for _, client := range []string{clientRaw, clientNetHTTP} {
		for _, keepAlive := range []bool{true, false} {
			for _, multi := range []int{1, 7} {
				n++
				slug := fmt.Sprintf("agree%d", n)
				name := fmt.Sprintf("%s keep-alive %v multi %d", client, keepAlive, multi)
				maxMulti := queues.MaxMulti
				_, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{MaxMulti: &maxMulti})
				require.NoError(t, err)
				_, err = env.engine.Enqueue(ctx, slug, queues.Target{Queue: queues.QueueTodo}, names(slug))
				require.NoError(t, err)
				o := loadOptions{url: env.url, project: slug, warriors: 4, multi: multi, duration: time.Minute, keepAlive: keepAlive, client: client}
				var report loadReport
				if client == clientRaw {
					report, err = loadWarriorsRaw(ctx, o)
				} else {
					report, err = loadWarriors(ctx, o)
				}
				require.NoError(t, err, name)
				require.True(t, report.Drained, name)
				require.Equal(t, int64(items), report.Items, name)
				require.Equal(t, int64((items+multi-1)/multi), report.RoundTrips, name)
				require.Positive(t, report.P99Millis, name)
				require.LessOrEqual(t, report.P50Millis, report.P99Millis, name)
				counts, err := env.engine.Counts(ctx, slug)
				require.NoError(t, err)
				require.Equal(t, int64(items), counts.Done, name)
				require.Zero(t, counts.Out, name)
				require.Zero(t, counts.Todo, name)
			}
		}
	}
}

// TestRawClientReportsAServersRefusal: a reply the warrior does not
// expect ends the run with an error that shows it.
func TestRawClientReportsAServersRefusal(t *testing.T) {
	unittier.Skip(t, "it runs a redis-server and a hoard server")
	ctx := context.Background()
	env, err := startBenchEnv(ctx, benchOptions{})
	require.NoError(t, err)
	t.Cleanup(env.stop)
	newer := "99990101.01"
	_, err = env.engine.CreateProject(ctx, "newer", queues.SettingsPatch{MinVersion: &newer})
	require.NoError(t, err)
	_, err = env.engine.Enqueue(ctx, "newer", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "a"}})
	require.NoError(t, err)
	_, err = loadWarriorsRaw(ctx, loadOptions{url: env.url, project: "newer", warriors: 2, multi: 1, duration: time.Minute, keepAlive: true})
	require.ErrorContains(t, err, "request: HTTP 455")
	_, err = loadWarriorsRaw(ctx, loadOptions{url: "https://127.0.0.1:1", project: "p", warriors: 1, multi: 1, duration: time.Second})
	require.ErrorContains(t, err, "plain http://")
}

// TestClientFlagIsChecked: an unknown --client is refused before anything
// starts, by load and by warrior-path.
func TestClientFlagIsChecked(t *testing.T) {
	_, err := runBench(t, "load", "--url", "http://127.0.0.1:1", "--project", "p", "--client", "curl")
	require.EqualError(t, err, `--client "curl": raw or net/http`)
	_, err = runBench(t, "warrior-path", "--client", "curl")
	require.EqualError(t, err, `--client "curl": raw or net/http`)
}
