package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
)

// TestBenchAnnounceSplitsTheCPUWithThePluginOutOfProcess: with --plugin,
// `hoard-bench announce` runs hoard's tracker as a hoard-bittorrent
// process and reports that process's CPU in the tracker column of hoard's
// rows (in this process the column is "-"), beside opentracker's.
func TestBenchAnnounceSplitsTheCPUWithThePluginOutOfProcess(t *testing.T) {
	unittier.Skip(t, "it builds the plugin and runs redis-server and opentracker")
	if _, err := exec.LookPath("/usr/bin/opentracker"); err != nil {
		t.Skipf("by design: opentracker is not installed (apt-get install -y opentracker): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "hoard-bittorrent")
	out, err := exec.Command("go", "build", "-o", bin, "../hoard-bittorrent").CombinedOutput()
	require.NoError(t, err, string(out))

	args := []string{"announce", "--modes", "udp", "--runs", "1", "--announces", "300", "--torrents", "20",
		"--metrics=false", "--concurrency", "4"}
	printed, err := runBench(t, append(args, "--plugin", bin)...)
	require.NoError(t, err, printed)
	require.Contains(t, printed, "(process "+bin+")")
	row := regexp.MustCompile(`(?m)^udp +hoard +(\d+) .* (\S+) +(\S+) +(\S+) +(\S+)$`).FindStringSubmatch(printed)
	require.NotNil(t, row, printed)
	rate, err := strconv.Atoi(row[1])
	require.NoError(t, err)
	require.Positive(t, rate, printed)
	_, err = strconv.ParseFloat(row[3], 64)
	require.NoError(t, err, "the tracker column is the plugin process's CPU: %s", printed)
	require.Regexp(t, `(?m)^udp +opentracker +\d+ .* \d+\.\d +\d+\.\d +\d+\.\d +-$`, printed)
	// Each run starts after a lead-in (one announce per torrent), and
	// hoard's is counted until what it wrote behind is written.
	require.Contains(t, printed, "each after a lead-in of 20", printed)
	require.Regexp(t, `(?m)^  run 1 +udp +hoard +udp: 300 announces .*; written \S+ after$`, printed)

	printed, err = runBench(t, append(args, "--plugin", "")...)
	require.NoError(t, err, printed)
	require.Contains(t, printed, "(in this process)")
	require.Regexp(t, `(?m)^udp +hoard +\d+ .* \d+\.\d +- +\d+\.\d +\d+\.\d$`, printed)

	_, err = runBench(t, "announce", "--plugin", bin, "--cpuprofile", filepath.Join(t.TempDir(), "p"))
	require.ErrorContains(t, err, `--plugin ""`)

	// --vs: a second plugin binary is one more target, its own row, its
	// CPU its process's, and its ratios to opentracker and to hoard.
	printed, err = runBench(t, append(args, "--plugin", bin, "--vs", bin)...)
	require.NoError(t, err, printed)
	require.Contains(t, printed, "hoard-vs: process "+bin)
	require.Regexp(t, `(?m)^udp +hoard-vs +[1-9]\d* .* \d+\.\d +\d+\.\d +\d+\.\d +\d+\.\d$`, printed)
	require.Regexp(t, `(?m)^udp +hoard-vs/ot +\d+\.\d\d$`, printed)
	require.Regexp(t, `(?m)^udp +hoard-vs/hoard +\d+\.\d\d$`, printed)
	_, err = runBench(t, append(args, "--plugin", bin, "--vs", filepath.Join(t.TempDir(), "missing"))...)
	require.ErrorContains(t, err, "--vs")
}
