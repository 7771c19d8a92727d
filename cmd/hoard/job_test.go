package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// oneJob is a plugin host with the plugin "bittorrent" and its job "reaper".
type oneJob struct{ ran int }

func (o *oneJob) RunJob(_ context.Context, plugin, job string) error {
	if plugin != "bittorrent" || job != "reaper" {
		return fmt.Errorf("%w: %q", pluginhost.ErrNoJob, job)
	}
	o.ran++
	return nil
}

func TestCLIRunsAJobNow(t *testing.T) {
	b := redistest.Require(t)[0]
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	jobs := &oneJob{}
	srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet, PluginJobs: jobs},
		queues.NewEngine(b.Client, queues.Options{Logger: quiet}))
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	out, err := runCLI(t, ts.URL, "job", "run", "bittorrent", "reaper")
	require.NoError(t, err, out)
	require.Contains(t, out, "ran job reaper of plugin bittorrent")
	require.Equal(t, 1, jobs.ran)
	_, err = runCLI(t, ts.URL, "job", "run", "bittorrent", "nosuch")
	require.ErrorContains(t, err, `has no job "nosuch" (HTTP 404)`)
	require.Equal(t, 1, jobs.ran)
}
