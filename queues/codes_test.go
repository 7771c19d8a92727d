package queues

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/lua"
)

func TestScriptCodesAreDistinctNegativeAndNamedInEveryScript(t *testing.T) {
	seen := map[int64]string{}
	for name, code := range scriptCodes {
		require.Negative(t, code, name)
		other, dup := seen[code]
		require.False(t, dup, "%s and %s share %d", name, other, code)
		seen[code] = name
	}
	require.Contains(t, luaCodes(), "NO_PROJECT = -1")

	// A script returns a named code, never a bare negative number.
	bare := regexp.MustCompile(`return \{\s*-\d`)
	names, err := fs.Glob(lua.Files, "*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		body, err := fs.ReadFile(lua.Files, name)
		require.NoError(t, err)
		for i, line := range strings.Split(string(body), "\n") {
			require.False(t, bare.MatchString(line), "%s:%d returns a bare code: %s", name, i+1, line)
		}
	}
}

func TestPlainScriptsNameOnlyTheirCodes(t *testing.T) {
	used := regexp.MustCompile(`R\.([A-Z_]+)`)
	for name, codes := range plainScriptCodes {
		body, err := fs.ReadFile(lua.Files, name)
		require.NoError(t, err)
		found := used.FindAllStringSubmatch(string(body), -1)
		require.NotEmpty(t, found, name)
		for _, m := range found {
			require.Contains(t, codes, m[1], "%s returns R.%s, which its R does not hold", name, m[1])
		}
	}
}
