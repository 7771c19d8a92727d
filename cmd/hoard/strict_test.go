package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// commandPaths lists every command of the tree as its arguments after
// "hoard" (the root is the empty path), with whether it has subcommands.
func commandPaths() (paths [][]string, groups map[string]bool) {
	groups = map[string]bool{}
	walkCommands(rootCommand(), func(c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		paths = append(paths, path)
		groups[strings.Join(path, " ")] = c.HasSubCommands()
	})
	return paths, groups
}

func executeArgs(args ...string) (string, error) {
	root := rootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// Every command of the tree refuses an unknown flag, and every group an
// unknown subcommand, with an error (a non-zero exit) rather than help and
// success.
func TestEveryCommandRefusesUnknownSubcommandsAndFlags(t *testing.T) {
	paths, groups := commandPaths()
	require.Greater(t, len(paths), 40, "the walk found the tree")
	checkedGroups := 0
	for _, path := range paths {
		name := "hoard " + strings.Join(path, " ")
		_, err := executeArgs(append(append([]string{}, path...), "--no-such-flag")...)
		require.Error(t, err, "%s --no-such-flag", name)
		require.Contains(t, err.Error(), "unknown flag: --no-such-flag", name)

		if !groups[strings.Join(path, " ")] {
			continue
		}
		checkedGroups++
		_, err = executeArgs(append(append([]string{}, path...), "zzbogus")...)
		require.Error(t, err, "%s zzbogus", name)
		require.Contains(t, err.Error(), `unknown command "zzbogus"`, name)

		// A subcommand's name less its last letter is suggested back.
		root := rootCommand()
		group, _, err := root.Find(path)
		require.NoError(t, err)
		first := group.Commands()[0].Name()
		if len(first) < 2 || group.Commands()[0].Hidden {
			continue
		}
		_, err = executeArgs(append(append([]string{}, path...), first[:len(first)-1])...)
		require.Error(t, err, "%s %s", name, first[:len(first)-1])
		require.Contains(t, err.Error(), "did you mean "+first, name)
	}
	require.Greater(t, checkedGroups, 5)
}

// The two typos the issue found, word for word, and a mistyped flag.
func TestTyposSuggestTheCommand(t *testing.T) {
	_, err := executeArgs("queue", "cont")
	require.ErrorContains(t, err, "did you mean counts?")
	_, err = executeArgs("bt", "torrent", "rm")
	require.ErrorContains(t, err, "did you mean remove?")
	_, err = executeArgs("claims", "list", "--limt", "3")
	require.ErrorContains(t, err, "did you mean --limit?")
	// A group with no argument still shows its help, and succeeds.
	out, err := executeArgs("queue")
	require.NoError(t, err)
	require.Contains(t, out, "Available Commands")
}

// --version names the Go toolchain that built the binary and the build's
// commit (the test binary has no VCS stamp: the -ldflags override shows).
func TestVersionPrintsBuild(t *testing.T) {
	saved := commit
	commit = "abc1234"
	defer func() { commit = saved }()
	out, err := executeArgs("--version")
	require.NoError(t, err)
	require.Contains(t, out, runtime.Version())
	require.Contains(t, out, "commit abc1234")
}
