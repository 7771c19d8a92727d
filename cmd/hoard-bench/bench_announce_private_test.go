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

// TestBenchAnnouncePrivateComparesAccountingOnAndOff: `hoard-bench
// announce-private` answers every announce of both configurations (a
// refused passkey, client or torrent would be an error), prints a row per
// configuration and their ratio, and the users' totals show accounting
// credited with it on and nothing with it off.
func TestBenchAnnouncePrivateComparesAccountingOnAndOff(t *testing.T) {
	unittier.Skip(t, "it runs two redis-servers and two trackers")
	printed, err := runBench(t, "announce-private", "--plugin", "", "--modes", "http-keepalive,udp", "--runs", "2",
		"--announces", "300", "--torrents", "20", "--users", "3", "--concurrency", "4")
	require.NoError(t, err, printed)
	for _, mode := range []string{"http-keepalive", "udp"} {
		var rates []float64
		for _, name := range []string{"accounting-on", "accounting-off"} {
			row := regexp.MustCompile(`(?m)^` + mode + ` +` + name + ` +(\d+) \(\d+ \d+\) .* (\d+) +\d+\.\d +- +\d+\.\d +\d+\.\d$`).FindStringSubmatch(printed)
			require.NotNil(t, row, "%s %s: %s", mode, name, printed)
			require.Equal(t, "0", row[2], "no errors: %s", printed)
			rate, err := strconv.ParseFloat(row[1], 64)
			require.NoError(t, err)
			require.Positive(t, rate)
			rates = append(rates, rate)
		}
		ratio := regexp.MustCompile(`(?m)^` + mode + ` +on/off +(\d+\.\d\d)$`).FindStringSubmatch(printed)
		require.NotNil(t, ratio, printed)
		got, err := strconv.ParseFloat(ratio[1], 64)
		require.NoError(t, err)
		require.InDelta(t, rates[0]/rates[1], got, 0.01, printed)
		// each on run is paired with the off run after it
		paired := regexp.MustCompile(`(?m)^` + mode + ` +on/off paired +(\d+\.\d\d) \((\d+\.\d\d) (\d+\.\d\d)\)$`).FindStringSubmatch(printed)
		require.NotNil(t, paired, printed)
		var pairs []float64
		for _, text := range paired[2:] {
			r, err := strconv.ParseFloat(text, 64)
			require.NoError(t, err)
			require.Positive(t, r)
			pairs = append(pairs, r)
		}
		require.Equal(t, paired[1], strconv.FormatFloat(max(pairs[0], pairs[1]), 'f', 2, 64), "the median of two is the upper: %s", printed)
	}
	on := regexp.MustCompile(`accounting-on: user u0 uploaded (\d+), downloaded (\d+) bytes; credited (\d+) up, (\d+) down`).FindStringSubmatch(printed)
	require.NotNil(t, on, printed)
	require.NotEqual(t, "0", on[1])
	require.Equal(t, on[1], on[3], "every torrent is normal: credited as raw")
	require.Equal(t, on[2], on[4])
	require.Regexp(t, `accounting-off: user u0 uploaded [1-9]\d*, downloaded \d+ bytes; credited 0 up, 0 down`, printed)

	_, err = runBench(t, "announce-private", "--users", "0")
	require.ErrorContains(t, err, "--users")
	_, err = runBench(t, "announce-private", "--cpuprofile", filepath.Join(t.TempDir(), "p"), "--plugin", "bin/hoard-bittorrent")
	require.ErrorContains(t, err, `--plugin ""`)
	_, err = runBench(t, "announce-private", "--cpuprofile", filepath.Join(t.TempDir(), "p"), "--plugin", "", "--modes", "udp", "--cpuprofile-mode", "http-keepalive")
	require.ErrorContains(t, err, "--cpuprofile-mode")
}

// TestBenchAnnouncePrivateProfilesEachTracker: --cpuprofile writes one
// profile of the measured runs in which each tracker's samples carry its
// own label, and prints each one's top functions.
func TestBenchAnnouncePrivateProfilesEachTracker(t *testing.T) {
	unittier.Skip(t, "it runs two redis-servers and two trackers")
	path := filepath.Join(t.TempDir(), "private.pprof")
	printed, err := runBench(t, "announce-private", "--plugin", "", "--modes", "udp", "--runs", "1",
		"--announces", "3000", "--torrents", "20", "--users", "3", "--concurrency", "4", "--cpuprofile", path)
	require.NoError(t, err, printed)
	require.FileExists(t, path)
	if _, err := exec.LookPath("go"); err == nil {
		require.Regexp(t, `(?m)^ +tracker: Total`, printed, "the samples split by tracker")
		require.Contains(t, printed, "accounting-on's goroutines, flat")
		require.Contains(t, printed, "accounting-off's goroutines, flat")
	}
}
