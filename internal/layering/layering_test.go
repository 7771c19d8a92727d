// Package layering holds the test that keeps hoard's packages in their
// layers: what each one may depend on is decided here, once, and checked
// over `go list` on every `make test`.
package layering

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/hoardproject/hoard"

// rule forbids every package matching from (a path, or a path/... tree)
// to depend on any package matching one of deny, directly or not.
type rule struct {
	from string
	deny []string
	why  string
}

var rules = []rule{
	{from: "plugins", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/prometheus/client_golang/...", "github.com/bits-and-blooms/bloom/v3"},
		why: "the plugin contract stands alone: a plugin sees only the contract"},
	{from: "plugins/plugintest", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard"},
		why: "the conformance suite needs only the contract, so any plugin can run it"},
	{from: "plugins/bittorrent/...", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/bits-and-blooms/bloom/v3"},
		why: "the BitTorrent plugin talks to hoard through the contract only"},
	{from: "cmd/hoard-bittorrent", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/prometheus/client_golang/...", "github.com/bits-and-blooms/bloom/v3"},
		why: "the plugin binary links neither the queue engine, bloom nor the metrics client"},
	{from: "queues/...", deny: []string{"server", "leaderboard", "plugins/...", "cmd/..."},
		why: "the queue engine knows nothing of its callers"},
	{from: "leaderboard/...", deny: []string{"server", "cmd/..."},
		why: "the leaderboard is served by the server, not the other way round"},
	{from: "server", deny: []string{"plugins/bittorrent/...", "server/btadmin"},
		why: "the server takes the BitTorrent admin calls as an admin extension (server/btadmin), never the plugin's store"},
	{from: "cmd/hoard", deny: []string{"plugins/bittorrent/loadgen"},
		why: "the load generators live in cmd/hoard-bench, out of the binary operators run"},
	{from: "plugins/pluginhost", deny: []string{"server", "leaderboard", "cmd/..."},
		why: "the plugin host is used by the server, it does not use it"},
	{from: "accounts", deny: []string{"server", "leaderboard", "cmd/...", "plugins/pluginhost", "plugins/bittorrent/..."},
		why: "accounts own their keys and scripts; the server checks roles, not the other way round"},
}

type listedPackage struct {
	ImportPath string
	Deps       []string
	Standard   bool
}

// matches reports whether path is pattern (module-relative unless it has a
// dot in its first element) or, for "x/...", in x's tree.
func matches(pattern, path string) bool {
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		full = module + "/" + pattern
	}
	if tree, ok := strings.CutSuffix(full, "/..."); ok {
		return path == tree || strings.HasPrefix(path, tree+"/")
	}
	return path == full
}

func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json=ImportPath,Deps,Standard", module+"/...")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []listedPackage
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

// violations lists "pkg -> dep (why)" for every broken rule.
func violations(pkgs []listedPackage) []string {
	var found []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !matches(r.from, p.ImportPath) {
				continue
			}
			for _, dep := range p.Deps {
				for _, deny := range r.deny {
					if matches(deny, dep) {
						found = append(found, p.ImportPath+" -> "+dep+" ("+r.why+")")
					}
				}
			}
		}
	}
	return found
}

func TestPackagesStayInTheirLayers(t *testing.T) {
	pkgs := listPackages(t)
	for _, r := range rules {
		seen := false
		for _, p := range pkgs {
			if matches(r.from, p.ImportPath) {
				seen = true
				break
			}
		}
		require.True(t, seen, "rule for %s matches no package: fix the rule", r.from)
	}
	require.Empty(t, violations(pkgs), "forbidden imports")
}

// TestTheCheckCatchesAForbiddenImport: the check would fail if the contract
// imported the queue engine (even through another package).
func TestTheCheckCatchesAForbiddenImport(t *testing.T) {
	pkgs := []listedPackage{
		{ImportPath: module + "/plugins", Deps: []string{"context", module + "/internal/x", module + "/queues"}},
		{ImportPath: module + "/queues", Deps: []string{module + "/lua"}},
		{ImportPath: module + "/leaderboard", Deps: []string{module + "/server"}},
	}
	got := violations(pkgs)
	require.Len(t, got, 2)
	require.Contains(t, got[0], "plugins -> "+module+"/queues")
	require.Contains(t, got[1], "leaderboard -> "+module+"/server")
}
