package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func configCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "The configuration file: print the defaults, check a file"}
	cmd.AddCommand(&cobra.Command{
		Use:   "defaults",
		Short: "Print a configuration file with every key, its default and what it does",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeDefaults(cmd.Context(), cmd.OutOrStdout())
		},
	}, &cobra.Command{
		Use:   "check FILE",
		Short: "Check a configuration file: each error with its line, every unknown key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := checkConfigFile(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", args[0])
			return nil
		},
	})
	return cmd
}

// writeDefaults prints serveSettings as a commented TOML file, every key
// set to its default, so the output is itself a valid configuration.
func writeDefaults(ctx context.Context, w io.Writer) error {
	var b strings.Builder
	b.WriteString(`# hoard serve's configuration (TOML): hoard serve --config FILE, or $HOARD_CONFIG.
# Every key is shown with its default. Precedence: a flag beats a variable,
# which beats this file, which beats the default.
# Secrets are never typed here: KEY_file = "PATH" reads one from a file,
# KEY_env = "VARIABLE" from a variable.
# A SIGHUP reloads the keys marked "reloaded on SIGHUP"; a change to any
# other is logged as needing a restart.
`)
	var scratch serveOptions
	for _, s := range serveSettings {
		if s.fromSections {
			continue
		}
		fmt.Fprintf(&b, "\n# %s\n# flag --%s, variable %s", s.help, s.flag, s.env)
		if s.reload {
			b.WriteString("; reloaded on SIGHUP")
		}
		b.WriteString("\n")
		key := s.fileKey()
		if s.secret {
			fmt.Fprintf(&b, "# %s%s = \"/etc/hoard/%s\"\n# %s%s = \"%s\"\n", key, secretFileSuffix, strings.ReplaceAll(key, "_", "-"), key, secretEnvSuffix, s.env)
			continue
		}
		fmt.Fprintf(&b, "%s = %s\n", key, tomlDefault(s, &scratch))
	}
	b.WriteString(`
# Plugins: one [plugin.NAME] section each (--plugin, variable HOARD_PLUGINS).
# path is the plugin's binary; empty or absent runs the builtin NAME.
# [plugin.NAME.settings] is the plugin's own settings document (flag
# --plugin-settings, variable HOARD_PLUGIN_SETTINGS; reloaded on SIGHUP:
# the plugin restarts with them). There, too, a secret is never typed:
# KEY_file or KEY_env gives the plugin KEY read from a file or a variable.
# Each builtin plugin follows with every key at its default; to run one,
# remove the "# " before its lines (the "## " lines say what a key does).
`)
	if err := writePluginDefaults(ctx, &b); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tomlDefault is a setting's default as a TOML value of the type the file
// wants for it.
func tomlDefault(s setting, scratch *serveOptions) string {
	switch s.ptr(scratch).(type) {
	case *bool, *int, *float64:
		return s.def
	case *time.Duration:
		return strconv.Quote(s.def)
	case *[]string:
		return "[]"
	}
	return strconv.Quote(s.def)
}
