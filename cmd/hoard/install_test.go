package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMakeInstallStagesAServiceIntoADestdir runs the Makefile's install
// (into a DESTDIR, so no user or systemctl) with stand-in binaries, and
// checks the unit runs the installed binary, the environment file keeps
// its secrets on a second install, and modes are right.
func TestMakeInstallStagesAServiceIntoADestdir(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is missing: %v", err)
	}
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	bins := t.TempDir()
	for _, name := range []string{"hoard", "hoard-bittorrent"} {
		require.NoError(t, os.WriteFile(filepath.Join(bins, name), []byte("#!/bin/sh\n"), 0o755))
	}
	dest := t.TempDir()
	install := func() {
		cmd := exec.Command("make", "-s", "-C", repo, "install-files", "DESTDIR="+dest, "PREFIX=/opt/hoard",
			"BINS="+filepath.Join(bins, "hoard")+" "+filepath.Join(bins, "hoard-bittorrent"))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	install()

	for _, name := range []string{"hoard", "hoard-bittorrent"} {
		info, err := os.Stat(filepath.Join(dest, "opt/hoard/bin", name))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/hoard.service"))
	require.NoError(t, err)
	require.Contains(t, string(unit), "ExecStart=/opt/hoard/bin/hoard serve")
	require.Contains(t, string(unit), "EnvironmentFile=-/etc/hoard/hoard.env")
	require.Contains(t, string(unit), "User=hoard")
	require.NotContains(t, string(unit), "/usr/local/bin")

	envPath := filepath.Join(dest, "etc/hoard/hoard.env")
	info, err := os.Stat(envPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode().Perm(), "the environment file holds the admin token")
	env, err := os.ReadFile(envPath)
	require.NoError(t, err)
	require.Contains(t, string(env), "HOARD_DATA_DIR=/var/lib/hoard")

	// An operator's settings survive a reinstall.
	require.NoError(t, os.WriteFile(envPath, []byte("HOARD_ADMIN_TOKEN=kept\n"), 0o640))
	install()
	env, err = os.ReadFile(envPath)
	require.NoError(t, err)
	require.Equal(t, "HOARD_ADMIN_TOKEN=kept\n", string(env))

	// Every HOARD_ variable the environment file names is one hoard reads.
	variables := map[string]bool{}
	for _, s := range serveSettings {
		variables[s.env] = true
	}
	template, err := os.ReadFile(filepath.Join(repo, "contrib/systemd/hoard.env"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(template), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		name, _, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "HOARD_") || strings.ContainsAny(name, " ") {
			continue
		}
		require.True(t, variables[name], "%s in hoard.env is not a setting of hoard serve", name)
	}

	// The unit reads the configuration file, which runs a private tracker
	// from the plugin binary installed beside hoard, its admin token from
	// the file make install generated.
	require.Contains(t, string(unit), "Environment=HOARD_CONFIG=/etc/hoard/hoard.toml")
	conf, err := os.ReadFile(filepath.Join(dest, "etc/hoard/hoard.toml"))
	require.NoError(t, err)
	require.Contains(t, string(conf), `path = "/opt/hoard/bin/hoard-bittorrent"`)
	token, err := os.ReadFile(filepath.Join(dest, "etc/hoard/admin-token"))
	require.NoError(t, err)
	require.Len(t, strings.TrimSpace(string(token)), 48)
	info, err = os.Stat(filepath.Join(dest, "etc/hoard/admin-token"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode().Perm())
	staged := filepath.Join(t.TempDir(), "hoard.toml")
	require.NoError(t, os.WriteFile(staged, []byte(strings.ReplaceAll(string(conf), "/etc/hoard/", dest+"/etc/hoard/")), 0o600))
	var o serveOptions
	fs := serveFlagSet(&o)
	cfg, err := loadConfigFile(staged)
	require.NoError(t, err)
	for _, name := range []string{"HOARD_ADMIN_TOKEN", "HOARD_PLUGINS", "HOARD_PLUGIN_SETTINGS", "HOARD_LISTEN", "HOARD_DATA_DIR"} {
		t.Setenv(name, "")
	}
	require.NoError(t, applySettings(fs, cfg))
	require.Equal(t, strings.TrimSpace(string(token)), o.adminToken)
	require.Equal(t, []string{"bittorrent=/opt/hoard/bin/hoard-bittorrent"}, o.plugins.plugins)
	require.Len(t, o.plugins.settings, 1)
	require.Contains(t, o.plugins.settings[0], `"mode":"private"`)
}

// Under sudo, Go is rarely in PATH: make install says how to build as the
// user and install as root, and fails.
func TestMakeInstallWithoutGoSaysWhatToRun(t *testing.T) {
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	cmd := exec.Command("make", "-s", "-C", repo, "install", "GO=/nonexistent/go", "DESTDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "make build && sudo make install-files")
	require.Contains(t, string(out), `sudo make install GO="$(command -v go)"`)
}
