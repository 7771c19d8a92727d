// Package docs_test keeps the front door honest: the README fits on a
// screen, and no link in it or in docs/ leads nowhere.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxREADMELines is the README's budget: what hoard is, the two commands, the
// tour and where to read on. Everything else belongs in docs/.
const maxREADMELines = 200

func TestREADMEFitsItsBudget(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := strings.Count(string(data), "\n")
	require.LessOrEqual(t, lines, maxREADMELines,
		"README.md has %d lines, over its %d: move the detail to a document under docs/", lines, maxREADMELines)
}

// markdownLink matches [text](target) and captures target; images and
// autolinks need no special case, since only relative targets are checked.
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestEveryDocsLinkLeadsSomewhere(t *testing.T) {
	files, err := filepath.Glob("*.md")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	files = append(files, "../README.md")

	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, line := range linesOutsideCode(string(data)) {
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, _, _ = strings.Cut(target, "#")
				path := filepath.Clean(filepath.Join(filepath.Dir(file), target))
				checked++
				if _, err := os.Stat(path); err == nil {
					continue
				}
				t.Errorf("%s: the link %q leads nowhere (%s does not exist)", file, m[1], path)
			}
		}
	}
	require.Positive(t, checked, "no relative link was found at all: the pattern is broken")
}

// linesOutsideCode drops fenced code blocks, where brackets and parentheses
// are code, not links.
func linesOutsideCode(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}
