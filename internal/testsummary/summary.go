package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// byDesignPrefix marks a skip that is right on every machine (a Linux-only
// test on another OS, a check that only means something on one backend).
// Under CI every other skip is a real client or part (a browser, aria2c,
// libtorrent, the lua client, redis-server, the cluster) that the runner
// failed to provide, so it fails the run.
const byDesignPrefix = "by design:"

// event is one line of `go test -json` (cmd/test2json), with the build
// events `go test -json` adds since Go 1.24.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // build-output and build-fail
	FailedBuild string // on a package's fail when it did not compile
}

// Skip is a skipped test (or a whole package a TestMain skipped) and why.
type Skip struct {
	Name   string // "<package> <test>", or "<package> (package)" for a TestMain that skipped
	Reason string
}

// Failure is a failed test, or a package that failed outside any test
// (it did not build, or TestMain or the binary itself failed).
type Failure struct {
	Name   string
	Output []string
}

// Report is what a whole run amounted to.
type Report struct {
	Packages int
	Passed   int
	Failed   int
	Skipped  int
	Failures []Failure
	Skips    []Skip
	// Forbidden are the skips a CI run does not allow (see byDesignPrefix).
	Forbidden []Skip
}

// OK reports whether the run passed: something ran, nothing failed, and
// under CI nothing that CI must provide was skipped.
func (r Report) OK() bool {
	return r.Packages > 0 && r.Failed == 0 && len(r.Forbidden) == 0
}

// testRecord is one test or subtest of a package, in the order it ran.
type testRecord struct {
	name   string
	result string // "pass", "fail", "skip", or "" when it never finished
	output []string
}

type packageRecord struct {
	tests  map[string]*testRecord
	order  []string
	output []string // lines printed outside any test (TestMain, go test itself)
}

// summarizer turns the event stream into progress lines and a Report.
type summarizer struct {
	out         io.Writer
	ci          bool
	packages    map[string]*packageRecord
	buildOutput map[string][]string // by ImportPath
	buildShown  map[string]bool
	report      Report
}

// Summarize reads `go test -json` from in, prints one line per finished
// package (and each failure's output as it happens) to out, then the
// skips, the failures and "N passed, N failed, N skipped". With ci set,
// a skip whose reason does not start with "by design:" makes the run fail.
func Summarize(in io.Reader, out io.Writer, ci bool) (Report, error) {
	s := &summarizer{
		out:         out,
		ci:          ci,
		packages:    map[string]*packageRecord{},
		buildOutput: map[string][]string{},
		buildShown:  map[string]bool{},
	}
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for lines.Scan() {
		line := lines.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (go test -json writes only events to stdout, so
			// this is someone else's output): pass it through unchanged.
			fmt.Fprintln(out, string(line))
			continue
		}
		s.handle(e)
	}
	if err := lines.Err(); err != nil {
		return s.report, fmt.Errorf("testsummary: reading go test -json: %w", err)
	}
	// Packages that never ended: go test was killed, or its output cut.
	unfinished := make([]string, 0, len(s.packages))
	for name := range s.packages {
		unfinished = append(unfinished, name)
	}
	sort.Strings(unfinished)
	for _, name := range unfinished {
		s.finishPackage(name, "fail", 0, "")
	}
	s.printSummary()
	return s.report, nil
}

func (s *summarizer) pkg(name string) *packageRecord {
	p := s.packages[name]
	if p == nil {
		p = &packageRecord{tests: map[string]*testRecord{}}
		s.packages[name] = p
	}
	return p
}

func (s *summarizer) handle(e event) {
	switch e.Action {
	case "build-output":
		s.buildOutput[e.ImportPath] = append(s.buildOutput[e.ImportPath], strings.TrimSuffix(e.Output, "\n"))
		return
	case "build-fail":
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.output = append(p.output, strings.TrimSuffix(e.Output, "\n"))
		case "pass", "fail", "skip":
			s.finishPackage(e.Package, e.Action, e.Elapsed, e.FailedBuild)
		}
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &testRecord{name: e.Test}
		p.tests[e.Test] = t
		p.order = append(p.order, e.Test)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, strings.TrimSuffix(e.Output, "\n"))
	case "pass", "fail", "skip":
		t.result = e.Action
		if e.Action == "pass" {
			t.output = nil // never printed; a whole suite's logs would pile up
		}
	}
}

// finishPackage counts a package's tests and prints its progress line,
// with the output of each of its failures.
func (s *summarizer) finishPackage(name, result string, elapsed float64, failedBuild string) {
	p := s.pkg(name)
	delete(s.packages, name)
	s.report.Packages++

	var failures []Failure
	skipped := 0
	for _, testName := range p.order {
		t := p.tests[testName]
		if t.result == "" {
			// Still running when the package ended: a timeout or a panic
			// elsewhere killed the binary, so it did not pass.
			t.result = "fail"
			t.output = append(t.output, "(did not finish: the test binary exited while it ran)")
		}
		if !counted(p, t) {
			continue
		}
		switch t.result {
		case "pass":
			s.report.Passed++
		case "fail":
			failures = append(failures, Failure{Name: name + " " + t.name, Output: withoutFraming(t.output)})
		case "skip":
			skipped++
			s.addSkip(Skip{Name: name + " " + t.name, Reason: skipReason(t.output)})
		}
	}
	for _, line := range p.output {
		if reason, ok := strings.CutPrefix(line, "SKIP: "); ok {
			// redistest.RunMain and friends print this and exit 0 when a
			// whole package cannot run.
			skipped++
			s.addSkip(Skip{Name: name + " (package)", Reason: reason})
		}
	}
	if result == "fail" && len(failures) == 0 {
		// Failed outside any test: did not build, TestMain failed, the
		// binary crashed before or after its tests, or go test was cut off.
		output := packageOutput(p.output)
		if failedBuild != "" {
			if s.buildShown[failedBuild] {
				output = []string{"build failed: " + failedBuild + " (its errors are shown above)"}
			} else {
				output = s.buildOutput[failedBuild]
				s.buildShown[failedBuild] = true
			}
		}
		if len(output) == 0 {
			output = []string{"(no output: the package ended without saying why)"}
		}
		failures = append(failures, Failure{Name: name + " (package)", Output: output})
	}
	s.report.Failed += len(failures)
	s.report.Failures = append(s.report.Failures, failures...)

	switch {
	case result == "skip" && len(p.order) == 0:
		fmt.Fprintf(s.out, "?    %s [no test files]\n", name)
	case result == "fail" || len(failures) > 0:
		fmt.Fprintf(s.out, "FAIL %s %.1fs\n", name, elapsed)
		for _, f := range failures {
			fmt.Fprintf(s.out, "--- FAIL: %s\n", f.Name)
			for _, line := range f.Output {
				fmt.Fprintf(s.out, "    %s\n", line)
			}
		}
	default:
		note := ""
		if skipped > 0 {
			note = fmt.Sprintf(" (%d skipped)", skipped)
		}
		fmt.Fprintf(s.out, "ok   %s %.1fs%s\n", name, elapsed, note)
	}
}

// counted says whether a test's result is its own. A test with subtests
// passes or fails because of them, so only the subtests count; the parent
// counts only when it failed or skipped by itself (t.Fatal after its
// subtests passed).
func counted(p *packageRecord, t *testRecord) bool {
	hasSubtests, subtestShares := false, false
	prefix := t.name + "/"
	for _, other := range p.order {
		if rest, ok := strings.CutPrefix(other, prefix); ok && !strings.Contains(rest, "/") {
			hasSubtests = true
			if p.tests[other].result == t.result {
				subtestShares = true
			}
		}
	}
	if !hasSubtests {
		return true
	}
	return t.result != "pass" && !subtestShares
}

func (s *summarizer) addSkip(skip Skip) {
	s.report.Skipped++
	s.report.Skips = append(s.report.Skips, skip)
	if s.ci && !strings.HasPrefix(skip.Reason, byDesignPrefix) {
		s.report.Forbidden = append(s.report.Forbidden, skip)
	}
}

// logLine is a t.Log/t.Skip line as the testing package prints it in -v
// mode: four spaces, file:line, the message. Continuation lines of a
// multi-line message are indented by eight.
var logLine = regexp.MustCompile(`^    [^\s:]+\.go:\d+: (.*)$`)

// skipReason is the last message the test logged before it skipped, which
// is the one t.Skip printed.
func skipReason(output []string) string {
	var messages [][]string
	for _, line := range output {
		if m := logLine.FindStringSubmatch(line); m != nil {
			messages = append(messages, []string{m[1]})
			continue
		}
		if len(messages) > 0 && strings.HasPrefix(line, "        ") {
			last := messages[len(messages)-1]
			messages[len(messages)-1] = append(last, strings.TrimSpace(line))
		}
	}
	if len(messages) == 0 {
		return "(no reason given)"
	}
	return strings.Join(messages[len(messages)-1], " ")
}

// withoutFraming drops the lines the testing package prints around a
// test's own output (=== RUN, === PAUSE, --- FAIL, ...).
func withoutFraming(output []string) []string {
	kept := make([]string, 0, len(output))
	for _, line := range output {
		if strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		kept = append(kept, line)
	}
	return kept
}

// packageOutput drops go test's own closing lines from a package's output.
func packageOutput(output []string) []string {
	kept := make([]string, 0, len(output))
	for _, line := range output {
		if line == "FAIL" || line == "PASS" || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "ok  \t") {
			continue
		}
		kept = append(kept, line)
	}
	return kept
}

func (s *summarizer) printSummary() {
	r := s.report
	fmt.Fprintln(s.out)
	if len(r.Skips) > 0 {
		fmt.Fprintf(s.out, "Skipped (%d):\n", len(r.Skips))
		for _, skip := range r.Skips {
			fmt.Fprintf(s.out, "  %s: %s\n", skip.Name, skip.Reason)
		}
	}
	if len(r.Failures) > 0 {
		fmt.Fprintf(s.out, "Failed (%d):\n", len(r.Failures))
		for _, f := range r.Failures {
			fmt.Fprintf(s.out, "  %s\n", f.Name)
		}
	}
	fmt.Fprintf(s.out, "%d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
	if r.Packages == 0 {
		fmt.Fprintln(s.out, "FAIL: no test results were read (did go test start?)")
	}
	if len(r.Forbidden) > 0 {
		fmt.Fprintf(s.out, "FAIL: under CI=true a skip means something CI must provide is missing; "+
			"only skips whose reason starts with %q are allowed. Skipped anyway (%d):\n", byDesignPrefix, len(r.Forbidden))
		for _, skip := range r.Forbidden {
			fmt.Fprintf(s.out, "  %s: %s\n", skip.Name, skip.Reason)
		}
	}
}
