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
	require.Contains(t, string(unit), "EnvironmentFile=/etc/hoard/hoard.env")
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
	serveSource, err := os.ReadFile("serve.go")
	require.NoError(t, err)
	template, err := os.ReadFile(filepath.Join(repo, "contrib/systemd/hoard.env"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(template), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		name, _, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "HOARD_") || strings.ContainsAny(name, " ") {
			continue
		}
		if name == "HOARD_PLUGINS" {
			continue // read by the plugin flags (plugins.go)
		}
		require.Contains(t, string(serveSource), `"`+name+`"`, "%s in hoard.env is not a setting of hoard serve", name)
	}
}
