package luascript_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"

	// Every package whose scripts luascript.Load makes at init: their
	// scripts are what TestEveryScriptLoadsAsAFunction loads.
	_ "github.com/hoardproject/hoard/accounts"
	_ "github.com/hoardproject/hoard/internal/lease"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	_ "github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	_ "github.com/hoardproject/hoard/queues"
)

// scriptDirs hold every Redis script hoard runs, and the parts others
// have prepended (scriptParts), which are not scripts.
var scriptDirs = []string{"../../lua", "../../lua/accounts", "../../plugins/bittorrent/btstore/lua"}

var scriptParts = map[string]bool{"prelude.lua": true, "fed_record.lua": true}

// Every script of every package loads as a Redis Function on a real
// redis-server and on the cluster: a script whose body references more
// than 60 of its parts' locals (Lua 5.1's upvalue limit), or that does not
// compile as a function's body, fails FUNCTION LOAD here, not in
// production. The test also checks that it saw every script file.
func TestEveryScriptLoadsAsAFunction(t *testing.T) {
	scripts := luascript.Loaded()
	seen := map[string]bool{}
	for _, s := range scripts {
		seen[filepath.Base(s.File())] = true
	}
	for _, dir := range scriptDirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		require.NoError(t, err)
		require.NotEmpty(t, files, dir)
		for _, file := range files {
			if scriptParts[filepath.Base(file)] {
				continue
			}
			require.True(t, seen[filepath.Base(file)], "%s is not loaded by any package this test imports: import it above", file)
		}
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		require.NoError(t, flushFunctions(t.Context(), b.Client))
		for _, s := range scripts {
			require.NoError(t, s.Load(t.Context(), b.Client), "FUNCTION LOAD of %s", s.File())
		}
	})
}

// Functions may not read or set globals (Redis refuses at the call, and
// only on the path that runs), so no script may: luac5.1's listing of
// every library names each global it reads or sets, and only Redis's own
// libraries and Lua's base functions are allowed.
func TestNoScriptUsesAGlobal(t *testing.T) {
	luac, err := exec.LookPath("luac5.1")
	if err != nil {
		t.Skip("needs luac5.1 (Debian's lua5.1, which make test's dependencies install)")
	}
	allowed := map[string]bool{}
	for _, name := range strings.Fields(`redis cjson cmsgpack bit struct string table math
		tonumber tostring type pairs ipairs next select unpack error pcall xpcall assert
		rawget rawset rawequal setmetatable getmetatable`) {
		allowed[name] = true
	}
	global := regexp.MustCompile(`\b(GETGLOBAL|SETGLOBAL)\b.*; (\S+)`)
	dir := t.TempDir()
	for _, s := range luascript.Loaded() {
		path := filepath.Join(dir, strings.ReplaceAll(s.File(), "/", "_"))
		require.NoError(t, os.WriteFile(path, []byte(s.Library()), 0o600))
		out, err := exec.Command(luac, "-p", "-l", path).CombinedOutput()
		require.NoError(t, err, "%s: %s", s.File(), out)
		for _, m := range global.FindAllStringSubmatch(string(out), -1) {
			require.False(t, m[1] == "SETGLOBAL", "%s sets the global %s", s.File(), m[2])
			require.True(t, allowed[m[2]], "%s reads the global %s", s.File(), m[2])
		}
	}
}
