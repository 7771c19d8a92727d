package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// summarize runs Summarize on recorded `go test -json` output (see
// testdata/record.sh), concatenated as one run.
func summarize(t *testing.T, ci bool, recordings ...string) (Report, string) {
	t.Helper()
	var readers []io.Reader
	for _, name := range recordings {
		data, err := os.ReadFile(filepath.Join("testdata", name+".jsonl"))
		require.NoError(t, err)
		readers = append(readers, bytes.NewReader(data))
	}
	var out bytes.Buffer
	report, err := Summarize(io.MultiReader(readers...), &out, ci)
	require.NoError(t, err)
	return report, out.String()
}

func TestPassingRunCountsLeafTests(t *testing.T) {
	report, out := summarize(t, false, "pass", "notests")
	require.True(t, report.OK(), out)
	// TestOne, TestSubs/single and TestSubs/cluster; TestSubs is their parent.
	require.Equal(t, 3, report.Passed)
	require.Zero(t, report.Failed)
	require.Zero(t, report.Skipped)
	require.Contains(t, out, "ok   example.com/fix/pass ")
	require.Contains(t, out, "?    example.com/fix/notests [no test files]\n")
	require.True(t, strings.HasSuffix(out, "\n3 passed, 0 failed, 0 skipped\n"), out)
}

func TestFailureIsPrintedWithItsOutput(t *testing.T) {
	report, out := summarize(t, false, "fail")
	require.False(t, report.OK())
	require.Equal(t, 2, report.Passed, "TestGood and TestBad/single")
	require.Equal(t, 1, report.Failed, "TestBad failed because of TestBad/cluster, so only the subtest counts")
	require.Equal(t, "example.com/fix/fail TestBad/cluster", report.Failures[0].Name)
	require.Contains(t, out, "FAIL example.com/fix/fail ")
	require.Contains(t, out, "--- FAIL: example.com/fix/fail TestBad/cluster\n")
	require.Contains(t, out, "f_test.go:8: want 3, got 4\n")
	require.Contains(t, out, "second line\n")
	require.NotContains(t, out, "=== RUN")
	require.Contains(t, out, "Failed (1):\n  example.com/fix/fail TestBad/cluster\n")
	require.True(t, strings.HasSuffix(out, "2 passed, 1 failed, 0 skipped\n"), out)
}

func TestParentThatFailsByItselfCounts(t *testing.T) {
	report, out := summarize(t, false, "parentfail")
	require.Equal(t, 1, report.Passed)
	require.Equal(t, 1, report.Skipped)
	require.Equal(t, 1, report.Failed)
	require.Equal(t, "example.com/fix/parentfail TestParentFailsItself", report.Failures[0].Name)
	require.Contains(t, out, "the parent's own check failed")
}

func TestSkipsAreListedWithTheirReasons(t *testing.T) {
	report, out := summarize(t, false, "skip", "pkgskip")
	require.True(t, report.OK(), "outside CI a skip is reported, not failed:\n"+out)
	require.Equal(t, 1, report.Passed)
	require.Equal(t, 4, report.Skipped)
	require.Equal(t, []Skip{
		{Name: "example.com/fix/skip TestBrowser", Reason: "chromium is not installed (apt-get install chromium)"},
		{Name: "example.com/fix/skip TestDesign", Reason: "by design: parent-death signals are Linux only"},
		{Name: "example.com/fix/skip TestMulti", Reason: "aria2c is missing (apt-get install aria2); CI installs it"},
		{Name: "example.com/fix/pkgskip (package)", Reason: "redis-server is not installed, so the Redis-backed tests cannot run"},
	}, report.Skips)
	require.Contains(t, out, "ok   example.com/fix/skip ")
	require.Contains(t, out, "(3 skipped)\n")
	require.Contains(t, out, "Skipped (4):\n")
	require.Contains(t, out, "  example.com/fix/skip TestMulti: aria2c is missing (apt-get install aria2); CI installs it\n")
	require.True(t, strings.HasSuffix(out, "1 passed, 0 failed, 4 skipped\n"), out)
}

func TestCIFailsOnSkipsThatAreNotByDesign(t *testing.T) {
	report, out := summarize(t, true, "skip", "pkgskip")
	require.False(t, report.OK())
	require.Zero(t, report.Failed, "the skips are not test failures; the run fails because of them")
	var forbidden []string
	for _, skip := range report.Forbidden {
		forbidden = append(forbidden, skip.Name)
	}
	require.Equal(t, []string{
		"example.com/fix/skip TestBrowser",
		"example.com/fix/skip TestMulti",
		"example.com/fix/pkgskip (package)",
	}, forbidden)
	require.Contains(t, out, "FAIL: under CI=true a skip means something CI must provide is missing; "+
		"only skips whose reason starts with \"by design:\" are allowed. Skipped anyway (3):\n")
}

func TestCIAllowsSkipsByDesign(t *testing.T) {
	report, out := summarize(t, true, "parentfail")
	require.Empty(t, report.Forbidden, out)
	report, out = summarize(t, true, "pass")
	require.True(t, report.OK(), out)
}

func TestBuildFailureShowsTheCompilerErrors(t *testing.T) {
	report, out := summarize(t, false, "buildfail", "pass")
	require.False(t, report.OK())
	require.Equal(t, 1, report.Failed)
	require.Equal(t, 3, report.Passed, "the other package still counts")
	require.Equal(t, "example.com/fix/buildfail (package)", report.Failures[0].Name)
	require.Contains(t, out, "FAIL example.com/fix/buildfail ")
	require.Contains(t, out, `cannot use "s" (untyped string constant) as int value`)
}

func TestPanicFailsTheTestThatPanicked(t *testing.T) {
	report, out := summarize(t, false, "panicky")
	require.False(t, report.OK())
	require.Equal(t, 1, report.Passed, "TestFine; TestNeverRuns never started")
	require.Equal(t, 1, report.Failed)
	require.Equal(t, "example.com/fix/panicky TestPanics", report.Failures[0].Name)
	require.Contains(t, out, "panic: assignment to entry in nil map")
}

func TestTimedOutTestFailsAlthoughItNeverEnded(t *testing.T) {
	// A timeout kills the binary mid-test: test2json reports the package's
	// fail but never one for the running test.
	report, out := summarize(t, false, "timeout")
	require.False(t, report.OK())
	require.Equal(t, 1, report.Failed)
	require.Equal(t, "example.com/fix/timeout TestHangs", report.Failures[0].Name)
	require.Contains(t, out, "panic: test timed out after 1s")
	require.Contains(t, out, "did not finish")
}

func TestStreamCutOffBeforeThePackageEndedFails(t *testing.T) {
	report, out := summarize(t, false, "cutoff")
	require.False(t, report.OK())
	require.Equal(t, 1, report.Packages)
	require.Contains(t, out, "FAIL example.com/fix/pass ")
}

func TestNothingReadFails(t *testing.T) {
	var out bytes.Buffer
	report, err := Summarize(strings.NewReader("go: not JSON at all\n"), &out, false)
	require.NoError(t, err)
	require.False(t, report.OK())
	require.Contains(t, out.String(), "go: not JSON at all\n", "lines that are not events pass through")
	require.Contains(t, out.String(), "0 passed, 0 failed, 0 skipped\nFAIL: no test results were read")
}

func TestSkipReasonIsTheLastMessage(t *testing.T) {
	require.Equal(t, "the reason", skipReason([]string{
		"=== RUN   TestX",
		"SKIP: printed by the test itself",
		"    x_test.go:10: an earlier log line",
		"    x_test.go:12: the reason",
		"--- SKIP: TestX (0.00s)",
	}))
	require.Equal(t, "(no reason given)", skipReason([]string{"=== RUN   TestX", "--- SKIP: TestX (0.00s)"}))
}
