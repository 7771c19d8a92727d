// Package layering holds the test that keeps hoard's packages in their
// layers: what each one may depend on is decided here, once, and checked
// over `go list` on every `make test`.
package layering

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/hoardproject/hoard"

// rule forbids every package matching from (a path, or a path/... tree)
// to depend on any package matching one of deny, directly or not.
// allow names packages a deny pattern covers that from may import
// directly: what they link in turn is theirs (the builtin plugin's
// Factory links the plugin, which is the point of a builtin), but from
// itself may import nothing else under deny.
type rule struct {
	from  string
	deny  []string
	allow []string
	why   string
}

var rules = []rule{
	{from: "plugins", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/prometheus/client_golang/...", "github.com/bits-and-blooms/bloom/v3"},
		why: "the plugin contract stands alone: a plugin sees only the contract"},
	{from: "plugins/plugintest", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard"},
		why: "the conformance suite needs only the contract, so any plugin can run it"},
	{from: "plugins/bittorrent/...", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/bits-and-blooms/bloom/v3"},
		why: "the BitTorrent plugin talks to hoard through the contract only"},
	{from: "plugins/bittorrent/btstore", deny: []string{"plugins/bittorrent/swarm", "plugins/bittorrent/scoring", "plugins/bittorrent/reaper",
		"plugins/bittorrent/outbox", "plugins/bittorrent/ipmetrics", "plugins/bittorrent/orphans", "plugins/bittorrent/btadmin", "plugins/bittorrent/btplugin"},
		why: "the storage owner sits below the domain packages that call it"},
	{from: "cmd/hoard-bittorrent", deny: []string{"queues", "plugins/pluginhost", "server", "leaderboard", "github.com/prometheus/client_golang/...", "github.com/bits-and-blooms/bloom/v3"},
		why: "the plugin binary links neither the queue engine, bloom nor the metrics client"},
	{from: "queues/...", deny: []string{"server", "leaderboard", "plugins/...", "cmd/..."},
		why: "the queue engine knows nothing of its callers"},
	{from: "leaderboard/...", deny: []string{"server", "cmd/..."},
		why: "the leaderboard is served by the server, not the other way round"},
	{from: "server/...", deny: []string{"plugins/bittorrent/..."},
		why: "the server forwards a plugin's API and pages through the contract (HandleRequest); it links none of a plugin's code"},
	{from: "cmd/hoard", deny: []string{"plugins/bittorrent/..."}, allow: []string{"plugins/bittorrent/btplugin"},
		why: "hoard links only the builtin plugin's Factory (btplugin.New), never its stores: the CLI speaks HTTP and JSON"},
	{from: "cmd/hoard", deny: []string{"internal/btloadgen"},
		why: "the load generators live in cmd/hoard-bench, out of the binary operators run"},
	{from: "plugins/pluginhost", deny: []string{"server", "leaderboard", "cmd/..."},
		why: "the plugin host is used by the server, it does not use it"},
	{from: "accounts", deny: []string{"server", "leaderboard", "cmd/...", "plugins/pluginhost", "plugins/bittorrent/..."},
		why: "accounts own their keys and scripts; the server checks roles, not the other way round"},
}

type listedPackage struct {
	ImportPath string
	Imports    []string
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
	cmd := exec.Command("go", "list", "-deps=false", "-json=ImportPath,Imports,Deps,Standard", module+"/...")
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

// violations lists "pkg -> dep (why)" for every broken rule. A rule with
// allow lets the package import the allowed packages, and link what they
// link; any other denied package it imports directly, or links through a
// package of its own, is a violation.
func violations(pkgs []listedPackage) []string {
	byPath := make(map[string]listedPackage, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var found []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !matches(r.from, p.ImportPath) {
				continue
			}
			// What only the allowed packages bring in.
			viaAllowed := map[string]bool{}
			for _, dep := range p.Deps {
				if matchesAny(r.allow, dep) {
					viaAllowed[dep] = true
					for _, d := range byPath[dep].Deps {
						viaAllowed[d] = true
					}
				}
			}
			for _, d := range p.Imports {
				if !matchesAny(r.allow, d) {
					delete(viaAllowed, d)
				}
			}
			for _, dep := range p.Deps {
				if viaAllowed[dep] && !linkedByOwn(p, dep, r, byPath) {
					continue
				}
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

// linkedByOwn reports whether p links dep through one of its direct
// imports that the rule does not allow (a package of its own).
func linkedByOwn(p listedPackage, dep string, r rule, byPath map[string]listedPackage) bool {
	for _, imp := range p.Imports {
		if matchesAny(r.allow, imp) || matchesAny(r.deny, imp) {
			continue
		}
		if slices.Contains(byPath[imp].Deps, dep) {
			return true
		}
	}
	return false
}

func matchesAny(patterns []string, path string) bool {
	for _, p := range patterns {
		if matches(p, path) {
			return true
		}
	}
	return false
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

// TestTheCheckKeepsThePluginOutOfTheHost: anything under server/ importing
// the BitTorrent plugin, even through another package, fails the check;
// cmd/hoard may import the plugin's Factory (which links the plugin) and
// no other package of it, directly or through a package of its own.
func TestTheCheckKeepsThePluginOutOfTheHost(t *testing.T) {
	bt := module + "/plugins/bittorrent"
	factory := listedPackage{ImportPath: bt + "/btplugin", Deps: []string{bt + "/swarm", bt + "/outbox"}}
	pkgs := []listedPackage{
		factory,
		{ImportPath: module + "/server/btadmin", Imports: []string{bt + "/swarm"}, Deps: []string{bt + "/swarm", module + "/server"}},
		{ImportPath: module + "/server", Imports: []string{module + "/internal/x"}, Deps: []string{module + "/internal/x", bt + "/scoring"}},
		{ImportPath: module + "/cmd/hoard", Imports: []string{bt + "/btplugin", bt + "/swarm"},
			Deps: []string{bt + "/btplugin", bt + "/swarm", bt + "/outbox"}},
	}
	got := violations(pkgs)
	require.Len(t, got, 3, "%q", got)
	require.Contains(t, got[0], "server/btadmin -> "+bt+"/swarm", "a package below server/ is covered")
	require.Contains(t, got[1], "server -> "+bt+"/scoring", "an indirect dependency counts")
	require.Contains(t, got[2], "cmd/hoard -> "+bt+"/swarm", "a store next to the Factory is refused")

	// Through a package of its own, the same store is refused too.
	own := listedPackage{ImportPath: module + "/internal/cli", Deps: []string{bt + "/swarm"}}
	got = violations([]listedPackage{factory, own, {ImportPath: module + "/cmd/hoard", Imports: []string{bt + "/btplugin", own.ImportPath},
		Deps: []string{bt + "/btplugin", bt + "/swarm", bt + "/outbox", own.ImportPath}}})
	require.Len(t, got, 1, "%q", got)
	require.Contains(t, got[0], "cmd/hoard -> "+bt+"/swarm")

	fine := []listedPackage{factory,
		{ImportPath: module + "/cmd/hoard", Imports: []string{bt + "/btplugin", module + "/plugins"},
			Deps: []string{bt + "/btplugin", bt + "/swarm", bt + "/outbox", module + "/plugins"}},
	}
	require.Empty(t, violations(fine), "the Factory alone, with what it links, is allowed")
}
