package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyOwner is the one package that builds and parses the BitTorrent
// plugin's key names (docs/bittorrent-storage.md).
const keyOwner = "plugins/bittorrent/btstore"

// pluginKeyPrefix starts every key of the BitTorrent plugin.
const pluginKeyPrefix = "hoard:bt:"

// keyLiteralAllowed lists files outside the owner that may spell the
// prefix, each with why.
var keyLiteralAllowed = map[string]string{
	"server/pluginapi_test.go": "asserts that the host writes no key of the plugin",
}

// keyLiterals lists "file:line: literal" for each string literal of the
// files under root that spells the plugin's key prefix, or, in the
// plugin's own tree, a torrent key's tag-and-suffix separator ("}:"):
// either is a key name being built outside its owner.
func keyLiterals(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == keyOwner || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || keyLiteralAllowed[rel] != "" {
			return nil
		}
		inPlugin := strings.HasPrefix(rel, "plugins/bittorrent/")
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(src), pluginKeyPrefix) && !(inPlugin && strings.Contains(string(src), "}:")) {
			return nil // most files: no need to parse
		}
		file, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			value, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if strings.Contains(value, pluginKeyPrefix) || (inPlugin && strings.Contains(value, "}:")) {
				found = append(found, rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line)+": "+lit.Value)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return found
}

func TestOnlyTheStorageOwnerSpellsTheBitTorrentKeys(t *testing.T) {
	found := keyLiterals(t, "../..")
	require.Empty(t, found, "key names of the BitTorrent plugin are built in %s only: call its builders", keyOwner)
}

func TestTheKeyCheckCatchesALiteral(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "plugins", "bittorrent", "swarm")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, keyOwner), 0o755))
	write := func(path, src string) {
		require.NoError(t, os.WriteFile(filepath.Join(root, path), []byte(src), 0o644))
	}
	write("plugins/bittorrent/swarm/a.go", "package swarm\n\nconst k = \"hoard:bt:\" + \"x\"\n")
	write("plugins/bittorrent/swarm/b.go", "package swarm\n\nfunc k(h string) string { return \"{\" + h + \"}:peer\" }\n")
	write(keyOwner+"/keys.go", "package btstore\n\nconst Prefix = \"hoard:bt:\"\n")
	found := keyLiterals(t, root)
	require.Len(t, found, 2, "%v", found)
	require.Contains(t, found[0], "a.go:3")
	require.Contains(t, found[1], "b.go:3")
}
