package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictCommands makes a mistyped subcommand or flag an error (non-zero
// exit) with a suggestion, everywhere in the tree. Cobra checks subcommand
// names only at the root: a group such as `hoard queue` given "cont"
// printed its help and exited 0, so a script never learnt that it did
// nothing.
func strictCommands(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	walkCommands(root, func(c *cobra.Command) {
		if !c.HasSubCommands() || c.Runnable() {
			return
		}
		c.Args = cobra.ArbitraryArgs
		c.SuggestionsMinimumDistance = 2
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				// The group itself: its help is what was asked for.
				return c.Help()
			}
			return unknownCommandError(c, args[0])
		}
	})
}

// walkCommands calls fn for c and every command below it.
func walkCommands(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, fn)
	}
}

// commonSynonyms are the names other CLIs use for hoard's commands, which
// no edit distance relates ("rm" for "remove").
var commonSynonyms = map[string][]string{
	"rm": {"remove", "delete"}, "del": {"delete", "remove"}, "ls": {"list"}, "get": {"show"},
	"new": {"create", "add"}, "edit": {"set"}, "update": {"set"},
}

func unknownCommandError(c *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, c.CommandPath())
	suggestions := c.SuggestionsFor(typed)
	for _, name := range commonSynonyms[typed] {
		if sub, _, err := c.Find([]string{name}); err == nil && sub != c && !slices.Contains(suggestions, name) {
			suggestions = append(suggestions, name)
		}
	}
	if len(suggestions) > 0 {
		msg += "; did you mean " + strings.Join(suggestions, " or ") + "?"
	}
	return fmt.Errorf("%s\nRun '%s --help' for its commands", msg, c.CommandPath())
}

// flagError adds the nearest flag's name to pflag's "unknown flag" error.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if typed, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if near := nearestFlag(c, typed); near != "" {
			msg += "; did you mean --" + near + "?"
		}
	}
	return fmt.Errorf("%s\nRun '%s --help' for its flags", msg, c.CommandPath())
}

// nearestFlag is the flag of c whose name is closest to typed, within two
// edits or sharing its prefix, or "".
func nearestFlag(c *cobra.Command, typed string) string {
	best, bestDistance := "", 3
	c.Flags().VisitAll(func(f *pflag.Flag) {
		d := editDistance(typed, f.Name)
		if strings.HasPrefix(f.Name, typed) {
			d = min(d, 1)
		}
		if d < bestDistance {
			best, bestDistance = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
