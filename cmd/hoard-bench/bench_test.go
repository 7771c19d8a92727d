package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
)

// runBench runs hoard-bench with args and returns what it printed.
func runBench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	saved := os.Stdout
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stdout = w
	cmd := benchCommand()
	cmd.SetArgs(args)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		done <- b
	}()
	err = cmd.ExecuteContext(context.Background())
	w.Close()
	os.Stdout = saved
	printed := <-done
	return out.String() + string(printed), err
}

// TestBenchFsyncMeasuresBothPolicies: `hoard-bench fsync` measures claim+done
// pairs on a server of each policy (it checks each runs the policy it is
// labelled with) and prints the ratio; a short run stands for make bench's.
func TestBenchFsyncMeasuresBothPolicies(t *testing.T) {
	unittier.Skip(t, "it runs redis-servers")
	out, err := runBench(t, "fsync", "--runs", "1", "--duration", "200ms", "--items", "20000", "--warriors", "2", "--dir", t.TempDir())
	require.NoError(t, err, out)
	for _, policy := range []string{"everysec", "always"} {
		match := regexp.MustCompile(`(?m)^    ` + policy + ` +(\d+) pairs/s`).FindStringSubmatch(out)
		require.NotNil(t, match, out)
		pairs, err := strconv.Atoi(match[1])
		require.NoError(t, err)
		require.Positive(t, pairs, out)
		require.Contains(t, out, "(AOF on, appendfsync "+policy+")")
	}
	require.Regexp(t, `always / everysec +\d+\.\d\d \(ratio of the medians\)`, out)

	_, err = runBench(t, "fsync", "--warriors", "0")
	require.EqualError(t, err, "--runs, --duration, --items and every --warriors must be positive")
}

// TestBenchIPMetricsMemoryCountsEveryPair: a short `hoard-bench
// ipmetrics-memory` registers every IP in all 8 metrics (it fails
// otherwise) and prints its bytes per pair.
func TestBenchIPMetricsMemoryCountsEveryPair(t *testing.T) {
	unittier.Skip(t, "it runs a redis-server")
	out, err := runBench(t, "ipmetrics-memory", "--ips", "2000", "--torrents", "10", "--geoip-db", "")
	require.NoError(t, err, out)
	require.Regexp(t, `registered 2000 IPs x 8 metrics .* users counted: 2000;`, out)
	require.Regexp(t, `\d+\.\d bytes per \(metric, IP\) pair`, out)
	require.Regexp(t, `btstat's layout .* \d+\.\d bytes per pair`, out)

	_, err = runBench(t, "ipmetrics-memory", "--ips", "10")
	require.ErrorContains(t, err, "--ips must be between 1000")
}

// TestDescribeCPURatios: the ceiling's CPU per call over each script's, by
// Redis's alone and with this process's, as the last quiet make bench
// measured them (claim 18.9 + 11.2, done 23.9 + 17.8, ceiling 4.6 + 7.5
// us); a figure of 0 (nothing measured) prints "-".
func TestDescribeCPURatios(t *testing.T) {
	claim := runFigure{items: 18.9, selfMicros: 11.2}
	done := runFigure{items: 23.9, selfMicros: 17.8}
	ceiling := runFigure{items: 4.6, selfMicros: 7.5}
	require.Equal(t, "CPU per call, the ceiling's over the script's: by Redis's claim 0.24, done 0.19; by Redis's and this process's claim 0.40, done 0.29",
		describeCPURatios(claim, done, ceiling))
	require.Contains(t, describeCPURatios(runFigure{}, done, ceiling), "by Redis's claim -, done 0.19")
}

// TestWarriorShareChargesTheWarriorsBesideAtTheirQuietCost: the backfeed's
// own CPU per new item is the run's less what its warriors' round trips
// cost in the quiet run; a run that queued nothing divides by one, not zero.
func TestWarriorShareChargesTheWarriorsBesideAtTheirQuietCost(t *testing.T) {
	f := outsideFigure{
		report:   loadReport{Items: 400_000},
		warriors: loadReport{RoundTrips: 30_000},
	}
	// 30,000 round trips at 40 us each over 400,000 new items: 3 us per item.
	require.InDelta(t, 3.0, f.warriorShare(40), 1e-9)
	f.report.Items = 0
	require.InDelta(t, 1_200_000.0, f.warriorShare(40), 1e-9)
}
