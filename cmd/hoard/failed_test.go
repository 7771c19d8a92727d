package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestCLIFailedItems: hoard project set --max-claims, then hoard failed
// list, export, requeue and delete against a real server; the requeued
// item is served again.
func TestCLIFailedItems(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		clock := queues.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet, Clock: clock})
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()

		out, err := runCLI(t, ts.URL, "project", "create", "failproj", "--reclaim-ttl", "1h")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "project", "set", "failproj", "--max-claims", "1")
		require.NoError(t, err, out)
		require.Contains(t, out, `"max_claims": 1`)
		_, err = runCLI(t, ts.URL, "project", "set", "failproj", "--fail-report-to", "bin")
		require.ErrorContains(t, err, "fail_report_to")

		_, err = engine.Enqueue(ctx, "failproj", queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "a"}, {Name: "b"}})
		require.NoError(t, err)
		_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "failproj", Downloader: "alice", IP: "127.0.0.1", Count: 2})
		require.NoError(t, err)
		clock.Advance(time.Hour)
		_, err = engine.Claim(ctx, queues.ClaimRequest{Project: "failproj", Downloader: "bob", IP: "127.0.0.1", Count: 2})
		require.Equal(t, queues.CodeNoItem, queues.CodeOf(err), "both failed at their reclaim")

		out, err = runCLI(t, ts.URL, "failed", "list", "failproj")
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^a\s+1\s+2026-11-22 13:00:00\s+max_claims\s+alice \(expired\)$`, out)
		require.Regexp(t, `(?m)^b\s+1\s+`, out)
		out, err = runCLI(t, ts.URL, "failed", "export", "failproj")
		require.NoError(t, err, out)
		require.Contains(t, out, `"item":"a"`)

		_, err = runCLI(t, ts.URL, "failed", "requeue", "failproj")
		require.ErrorContains(t, err, "--all")
		out, err = runCLI(t, ts.URL, "failed", "requeue", "failproj", "a", "nope", "--queue", "secondary")
		require.NoError(t, err, out)
		require.Contains(t, out, "1 failed items requeued to secondary (1 named were not failed; left alone)")
		res, err := engine.Claim(ctx, queues.ClaimRequest{Project: "failproj", Downloader: "carol", IP: "127.0.0.1", Count: 1})
		require.NoError(t, err)
		require.Equal(t, "a", res.Items[0].Name, "the requeued item is served again")

		out, err = runCLI(t, ts.URL, "failed", "delete", "failproj", "--all")
		require.NoError(t, err, out)
		require.Contains(t, out, "1 failed items deleted")
		c, err := engine.Counts(ctx, "failproj")
		require.NoError(t, err)
		require.Zero(t, c.Failed)
	})
}
