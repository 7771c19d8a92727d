package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/unittier"
)

// TestBenchAnnouncePrivateComparesAccountingOnAndOff: `hoard-bench
// announce-private` answers every announce of both configurations (a
// refused passkey, client or torrent would be an error), prints a row per
// configuration and their ratio, and the users' totals show accounting
// credited with it on and nothing with it off. Each rate comes twice, over
// the run and over the run with its settling, which is never faster.
func TestBenchAnnouncePrivateComparesAccountingOnAndOff(t *testing.T) {
	unittier.Skip(t, "it runs two redis-servers and two trackers")
	printed, err := runBench(t, "announce-private", "--plugin", "", "--modes", "http-keepalive,udp", "--runs", "2",
		"--announces", "300", "--duration", "1s", "--at-once", "2", "--torrents", "20", "--users", "3", "--concurrency", "4", "--warmup-passes", "2")
	require.NoError(t, err, printed)
	// two warm-up passes over every peer per tracker and mode, the load
	// line saying so
	require.Contains(t, printed, "every peer announcing 2 times")
	require.Len(t, regexp.MustCompile(`(?m)^  warm-up \S+ +accounting-(on|off) +pass 2: `).FindAllString(printed, -1), 4, printed)
	for _, mode := range []string{"http-keepalive", "udp"} {
		var rates, settled []float64
		for _, name := range []string{"accounting-on", "accounting-off"} {
			row := regexp.MustCompile(`(?m)^` + mode + ` +` + name + ` +(\d+) +(\d+) \(\d+ \d+\) .* (\d+) +\d+\.\d +- +\d+\.\d +\d+\.\d$`).FindStringSubmatch(printed)
			require.NotNil(t, row, "%s %s: %s", mode, name, printed)
			require.Equal(t, "0", row[3], "no errors: %s", printed)
			rate := parseFloat(t, row[1])
			require.Positive(t, rate)
			withSettle := parseFloat(t, row[2])
			require.Positive(t, withSettle)
			require.LessOrEqual(t, withSettle, rate, "the settling only adds time: %s", printed)
			rates, settled = append(rates, rate), append(settled, withSettle)
		}
		ratio := regexp.MustCompile(`(?m)^` + mode + ` +on/off +(\d+\.\d\d) +(\d+\.\d\d)$`).FindStringSubmatch(printed)
		require.NotNil(t, ratio, printed)
		require.InDelta(t, rates[0]/rates[1], parseFloat(t, ratio[1]), 0.01, printed)
		require.InDelta(t, settled[0]/settled[1], parseFloat(t, ratio[2]), 0.01, printed)
		// each on run is paired with the off run beside it
		paired := regexp.MustCompile(`(?m)^` + mode + ` +on/off paired +(\d+\.\d\d) +(\d+\.\d\d) \(run: (\d+\.\d\d) (\d+\.\d\d); \+settle: (\d+\.\d\d) (\d+\.\d\d)\)$`).FindStringSubmatch(printed)
		require.NotNil(t, paired, printed)
		for k, median := range paired[1:3] {
			pairs := []float64{parseFloat(t, paired[3+2*k]), parseFloat(t, paired[4+2*k])}
			require.Positive(t, pairs[0])
			require.Positive(t, pairs[1])
			require.Equal(t, median, strconv.FormatFloat(max(pairs[0], pairs[1]), 'f', 2, 64), "the median of two is the upper: %s", printed)
		}
		// and both at once, each run's on over its off, each run --duration long
		atOnce := regexp.MustCompile(`(?m)^` + mode + ` +on/off at once +(\d+\.\d\d) +(\d+\.\d\d) \(run: (\d+\.\d\d) (\d+\.\d\d); \+settle: (\d+\.\d\d) (\d+\.\d\d)\)$`).FindStringSubmatch(printed)
		require.NotNil(t, atOnce, printed)
		for k := range 2 {
			var rates [2]float64
			for i, name := range []string{"accounting-on", "accounting-off"} {
				run := regexp.MustCompile(`(?m)^  at once ` + strconv.Itoa(k+1) + ` +` + mode + ` +` + name + ` +` + mode + `: \d+ announces in (\S+) = (\d+)/s, .*, 0 errors, .*: (\d+)/s with it;`).FindStringSubmatch(printed)
				require.NotNil(t, run, "%s at once %d %s: %s", mode, k+1, name, printed)
				elapsed, err := time.ParseDuration(run[1])
				require.NoError(t, err)
				require.GreaterOrEqual(t, elapsed, time.Second, "--duration ends an at-once run: %s", printed)
				rates[i] = parseFloat(t, run[2])
			}
			require.InDelta(t, rates[0]/rates[1], parseFloat(t, atOnce[3+k]), 0.01, printed)
		}
	}
	// every run says what the other tracker used meanwhile (its last run
	// settled, so little)
	require.Len(t, regexp.MustCompile(`(?m)^  run \d .*; accounting-(on|off) meanwhile \d+ms CPU$`).FindAllString(printed, -1), 8, printed)
	on := regexp.MustCompile(`accounting-on: user u0 uploaded (\d+), downloaded (\d+) bytes; credited (\d+) up, (\d+) down`).FindStringSubmatch(printed)
	require.NotNil(t, on, printed)
	require.NotEqual(t, "0", on[1])
	require.Equal(t, on[1], on[3], "every torrent is normal: credited as raw")
	require.Equal(t, on[2], on[4])
	require.Regexp(t, `accounting-off: user u0 uploaded [1-9]\d*, downloaded \d+ bytes; credited 0 up, 0 down; outbox events appended 0, the site acknowledged 0`, printed)
	// the site read and acknowledged every event the feed appended: the
	// last run's settled, and the site caught up after it
	fed := regexp.MustCompile(`accounting-on: .*; outbox events appended (\d+), the site acknowledged (\d+)`).FindStringSubmatch(printed)
	require.NotNil(t, fed, printed)
	require.NotEqual(t, "0", fed[1], printed)
	require.Equal(t, fed[1], fed[2], printed)
	require.Contains(t, printed, "the site reads and acknowledges each outbox")
	// the swarms churn by default, for both trackers
	require.Contains(t, printed, "churn: 5.0% of the measured announces are a peer stopping, its next one a start")

	_, err = runBench(t, "announce-private", "--users", "0")
	require.ErrorContains(t, err, "--users")
	_, err = runBench(t, "announce-private", "--announces", "0", "--duration", "0")
	require.ErrorContains(t, err, "nothing would end a run")
	_, err = runBench(t, "announce-private", "--announces", "10", "--duration", "0")
	require.ErrorContains(t, err, "--at-once runs end with --duration")
	_, err = runBench(t, "announce-private", "--concurrency", "1")
	require.ErrorContains(t, err, "--at-once halves --concurrency")
	_, err = runBench(t, "announce-private", "--at-once", "-1")
	require.ErrorContains(t, err, "--at-once must be between 0 and 100")
	for _, bad := range []string{"1", "-0.5", "NaN"} {
		_, err = runBench(t, "announce-private", "--stop-fraction", bad)
		require.ErrorContains(t, err, "--stop-fraction must be at least 0 and below 1", bad)
	}
	_, err = runBench(t, "announce-private", "--warmup-passes", "0")
	require.ErrorContains(t, err, "--warmup-passes must be between 1 and 20")
	_, err = runBench(t, "announce-private", "--warmup", "100", "--warmup-passes", "2")
	require.ErrorContains(t, err, "only with --warmup 0")
	_, err = runBench(t, "announce-private", "--cpuprofile", filepath.Join(t.TempDir(), "p"), "--plugin", "bin/hoard-bittorrent")
	require.ErrorContains(t, err, `--plugin ""`)
	_, err = runBench(t, "announce-private", "--cpuprofile", filepath.Join(t.TempDir(), "p"), "--plugin", "", "--modes", "udp", "--cpuprofile-mode", "http-keepalive")
	require.ErrorContains(t, err, "--cpuprofile-mode")
}

// TestBenchAnnouncePrivateProfilesEachTracker: --cpuprofile writes one
// profile of the measured runs in which each tracker's samples carry its
// own label, and prints each one's top functions. Its runs are bounded by
// --duration alone.
func TestBenchAnnouncePrivateProfilesEachTracker(t *testing.T) {
	unittier.Skip(t, "it runs two redis-servers and two trackers")
	path := filepath.Join(t.TempDir(), "private.pprof")
	printed, err := runBench(t, "announce-private", "--plugin", "", "--modes", "udp", "--runs", "1",
		"--duration", "1s", "--at-once", "0", "--torrents", "20", "--users", "3", "--concurrency", "4", "--cpuprofile", path)
	require.NoError(t, err, printed)
	runs := regexp.MustCompile(`(?m)^  run 1 +udp +accounting-o(n|ff) +udp: \d+ announces in (\S+) = `).FindAllStringSubmatch(printed, -1)
	require.Len(t, runs, 2, printed)
	for _, run := range runs {
		elapsed, err := time.ParseDuration(run[2])
		require.NoError(t, err)
		require.GreaterOrEqual(t, elapsed, time.Second, "--duration ends the run: %s", printed)
		require.Less(t, elapsed, 3*time.Second, "--duration ends the run: %s", printed)
	}
	require.FileExists(t, path)
	if _, err := exec.LookPath("go"); err == nil {
		require.Regexp(t, `(?m)^ +tracker: Total`, printed, "the samples split by tracker")
		require.Contains(t, printed, "accounting-on's goroutines, flat")
		require.Contains(t, printed, "accounting-off's goroutines, flat")
	}
}

func parseFloat(t *testing.T, text string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(text, 64)
	require.NoError(t, err)
	return f
}
