package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
)

// TestCLIFilters: hoard filters add, list and remove against a real
// server; a bad filter is refused with the server's reason and changes
// nothing; an admin add through the CLI drops what the filter matches.
func TestCLIFilters(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		engine, ts := cliServer(t, b)

		out, err := runCLI(t, ts.URL, "project", "create", "filterproj")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "filters", "add", "filterproj", "no-js", "--glob", "*.js")
		require.NoError(t, err, out)
		require.Regexp(t, `(?m)^no-js\s+glob \*\.js$`, out)
		_, err = runCLI(t, ts.URL, "filters", "add", "filterproj", "bad", "--regex", "(x")
		require.ErrorContains(t, err, "bad RE2 expression")
		_, err = runCLI(t, ts.URL, "filters", "add", "filterproj", "both", "--type", "a", "--glob", "b")
		require.ErrorContains(t, err, "set exactly one of type, glob and regex")
		out, err = runCLI(t, ts.URL, "filters", "list", "filterproj")
		require.NoError(t, err, out)
		require.Equal(t, "NAME   MATCHES\nno-js  glob *.js\n", out, "the refused adds changed nothing")

		path := filepath.Join(t.TempDir(), "items.txt")
		require.NoError(t, os.WriteFile(path, []byte("a.js\nb.html\n"), 0o600))
		out, err = runCLI(t, ts.URL, "queue", "add", "filterproj", path)
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 1 items into todo of filterproj;")
		require.Contains(t, out, "; 1 dropped by the project's filters")
		// b.html is queued; a filter added with --sift drops it at once.
		out, err = runCLI(t, ts.URL, "filters", "add", "filterproj", "no-html", "--glob", "*.html", "--sift")
		require.NoError(t, err, out)
		require.Contains(t, out, "dropped 1 queued items (1 looked at)")
		out, err = runCLI(t, ts.URL, "filters", "remove", "filterproj", "no-html")
		require.NoError(t, err, out)
		out, err = runCLI(t, ts.URL, "queue", "add", "filterproj", path)
		require.NoError(t, err, out)
		require.Contains(t, out, "queued 1 items into todo of filterproj;")
		c, err := engine.Counts(ctx, "filterproj")
		require.NoError(t, err)
		require.EqualValues(t, 1, c.Todo, "a.js was dropped")

		out, err = runCLI(t, ts.URL, "filters", "remove", "filterproj", "no-js")
		require.NoError(t, err, out)
		require.Equal(t, "NAME  MATCHES\n", out)
		_, err = runCLI(t, ts.URL, "filters", "remove", "filterproj", "no-js")
		require.ErrorContains(t, err, `no filter named "no-js"`)
	})
}
