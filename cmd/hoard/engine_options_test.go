package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// --all-frontends-count-batches reaches the engine as the negation of
// queues.Options.PreBatchFrontends: on by default, off from the file (as
// an operator upgrading from a build before claim batches sets it), and
// a value that is no boolean names its variable.
func TestAllFrontendsCountBatchesReachesTheEngine(t *testing.T) {
	t.Setenv("HOARD_ALL_FRONTENDS_COUNT_BATCHES", "")
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	var o serveOptions
	fs := serveFlagSet(&o)
	require.NoError(t, applySettings(fs, nil))
	require.False(t, engineOptions(o, logger).PreBatchFrontends, "on by default")
	require.Empty(t, logs.String())

	file := filepath.Join(t.TempDir(), "hoard.toml")
	require.NoError(t, os.WriteFile(file, []byte("all_frontends_count_batches = false\n"), 0o600))
	cfg, err := loadConfigFile(file)
	require.NoError(t, err)
	o = serveOptions{}
	fs = serveFlagSet(&o)
	require.NoError(t, applySettings(fs, cfg))
	opts := engineOptions(o, logger)
	require.True(t, opts.PreBatchFrontends, "off from the file")
	require.Same(t, logger, opts.Logger)
	require.Contains(t, logs.String(), "--all-frontends-count-batches=false")

	t.Setenv("HOARD_ALL_FRONTENDS_COUNT_BATCHES", "maybe")
	o = serveOptions{}
	fs = serveFlagSet(&o)
	require.ErrorContains(t, applySettings(fs, nil), "$HOARD_ALL_FRONTENDS_COUNT_BATCHES")
}
