package main

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestViewerLimitsAreCheckedAndBoundedByTheDescriptorLimit: bad values
// are refused with a message naming the flag; an explicit total above
// what the limit allows is lowered with a warning; 0 derives it.
func TestViewerLimitsAreCheckedAndBoundedByTheDescriptorLimit(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ok := serveOptions{maxViewersPerAddress: 50, viewerIdleTimeout: 70 * time.Second}

	total, err := viewerLimits(ok, 256, logger)
	require.NoError(t, err)
	require.Equal(t, 128, total)

	asked := ok
	asked.maxViewers = 100
	total, err = viewerLimits(asked, 256, logger)
	require.NoError(t, err)
	require.Equal(t, 100, total)
	require.NotContains(t, logs.String(), "lowered")

	asked.maxViewers = 20000
	total, err = viewerLimits(asked, 20000, logger)
	require.NoError(t, err)
	require.Equal(t, 15000, total)
	require.Contains(t, logs.String(), "lowered")
	require.Contains(t, logs.String(), "asked=20000 max_viewers=15000")

	for flag, bad := range map[string]serveOptions{
		"--max-viewers":             {maxViewers: -1, maxViewersPerAddress: 50, viewerIdleTimeout: time.Minute},
		"--max-viewers-per-address": {maxViewersPerAddress: 0, viewerIdleTimeout: time.Minute},
		"--viewer-idle-timeout":     {maxViewersPerAddress: 50, viewerIdleTimeout: time.Millisecond},
	} {
		_, err := viewerLimits(bad, 256, logger)
		require.ErrorContains(t, err, flag)
	}
}

// TestMalformedViewerEnvironmentIsRefused: a number or duration that does
// not parse stops `hoard serve` with a message naming the variable,
// before anything starts.
func TestMalformedViewerEnvironmentIsRefused(t *testing.T) {
	for name, value := range map[string]string{
		"HOARD_MAX_VIEWERS_PER_ADDRESS": "fifty",
		"HOARD_MAX_VIEWERS":             "1e4",
		"HOARD_VIEWER_IDLE_TIMEOUT":     "70",
	} {
		t.Setenv(name, value)
		cmd := serveCommand()
		cmd.SetArgs([]string{})
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.Execute()
		require.ErrorContains(t, err, "$"+name, name)
		t.Setenv(name, "")
	}
}

func TestLogLevelIsParsedAndRefusedWhenUnknown(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "WARN": slog.LevelWarn, "error": slog.LevelError} {
		got, err := parseLogLevel(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseLogLevel("loud")
	require.EqualError(t, err, `--log-level / HOARD_LOG_LEVEL: "loud" is not debug, info, warn or error`)
}

func TestNonPositivePluginEventRetryIsRefusedBeforeAnythingStarts(t *testing.T) {
	_, err := runCLI(t, "", "serve", "--plugin-event-retry", "0s", "--data-dir", t.TempDir())
	require.EqualError(t, err, "--plugin-event-retry must be positive, got 0s")
}
