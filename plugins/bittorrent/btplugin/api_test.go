package btplugin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
)

// adminCall makes one admin call through the plugin contract, as the host
// forwards it, and requires it to succeed.
func adminCall(t *testing.T, tr *btplugin.Tracker, method, path, body string) {
	t.Helper()
	resp, err := tr.HandleRequest(t.Context(), plugins.Request{Method: method, Path: path, Body: []byte(body),
		Role: plugins.RoleAdmin, Actor: "test from 127.0.0.1"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status, "%s %s: %s", method, path, resp.Body)
}

// admitted announces to a frontend's HTTP listener and reports whether
// the tracker answered with peers rather than a failure.
func admitted(t *testing.T, client *http.Client, addr, passkey string, hash [20]byte) bool {
	t.Helper()
	q := url.Values{"info_hash": {string(hash[:])}, "peer_id": {"-TR3000-000000000001"}, "port": {"6881"},
		"uploaded": {"0"}, "downloaded": {"0"}, "left": {"0"}, "compact": {"1"}}
	resp, err := client.Get("http://" + addr + "/" + passkey + "/announce?" + q.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return !strings.Contains(string(body), "failure reason")
}

// TestAdminChangeReachesEveryFrontendAtOnce measures the delay from an
// admin change made through one frontend's plugin (its API, as the host
// forwards it) to the next announce on another frontend that sees it. The
// frontends cache passkeys for 10 s; the hint makes the delay a matter of
// milliseconds. The figure is logged: go test -v -run
// TestAdminChangeReachesEveryFrontendAtOnce ./plugins/bittorrent/btplugin
func TestAdminChangeReachesEveryFrontendAtOnce(t *testing.T) {
	const rounds = 20
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		// Every round's first announce is a miss from one address: the
		// passkey-miss guard would block it after 10, which is not what
		// this measures.
		settings := `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","limits":{"announce_rate":-1,"passkey_misses":-1}}`
		a, _ := startTracker(t, b, settings)
		_, addrs := startTracker(t, b, settings)
		client := &http.Client{Timeout: 5 * time.Second}
		hash := [20]byte{0xad, 0x31}
		adminCall(t, a, http.MethodPut, fmt.Sprintf("/torrents/%x", hash), `{"id":"1"}`)
		adminCall(t, a, http.MethodPut, "/clients/-TR", `{"name":"Transmission"}`)

		// wait announces on the other frontend until admitted is want,
		// and returns how long that took after the change returned.
		wait := func(passkey string, want bool, changed time.Time) time.Duration {
			deadline := changed.Add(5 * time.Second)
			for admitted(t, client, addrs["http"], passkey, hash) != want {
				require.True(t, time.Now().Before(deadline), "the change never reached the other frontend")
			}
			return time.Since(changed)
		}
		var added, removed []time.Duration
		for i := range rounds {
			passkey := fmt.Sprintf("passkey%02dabcdefghijklmnopqrstuvwxyz", i) // 32+ characters, as sites issue them
			// The other frontend caches the miss first, then the hit.
			require.False(t, admitted(t, client, addrs["http"], passkey, hash))
			adminCall(t, a, http.MethodPut, "/users/"+passkey, `{"user_id":"7"}`)
			added = append(added, wait(passkey, true, time.Now()))
			adminCall(t, a, http.MethodDelete, "/users/"+passkey, "")
			removed = append(removed, wait(passkey, false, time.Now()))
		}
		slices.Sort(added)
		slices.Sort(removed)
		t.Logf("admin change to the next announce on another frontend, %d rounds (%s): passkey added: median %s, max %s; passkey removed: median %s, max %s",
			rounds, b.Name, added[rounds/2], added[rounds-1], removed[rounds/2], removed[rounds-1])
		require.Less(t, added[rounds-1], time.Second, "well under the 10 s cache")
		require.Less(t, removed[rounds-1], time.Second, "well under the 10 s cache")
	})
}
