package btadmin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// TestScopedCallsAreCheckedByThePlugin: the plugin checks a scoped
// caller's scopes itself (defence in depth: the host checks them first),
// so a call no scope the caller holds opens is refused with 403 however
// it got here, and one a scope opens reaches its handler (here 503 or
// 404, as the parts are off: anything but 403).
func TestScopedCallsAreCheckedByThePlugin(t *testing.T) {
	api := btadmin.NewAPI(&btadmin.Admin{}, &btadmin.MetricsAdmin{}, &btadmin.TrackerViews{}, quiet)
	hash := strings.Repeat("ab", 20)
	for _, c := range []struct {
		role, method, path string
		scopes             []string
		allowed            bool
	}{
		{plugins.RoleAdmin, http.MethodGet, "/stats", nil, true},
		{plugins.RoleScoped, http.MethodPut, "/torrents/" + hash, []string{"site"}, true},
		{plugins.RoleScoped, http.MethodGet, "/outbox/events", []string{"site"}, true},
		{plugins.RoleScoped, http.MethodGet, "/stats", []string{"site"}, false},
		{plugins.RoleScoped, http.MethodPost, "/reaper/extend", []string{"site"}, false},
		{plugins.RoleScoped, http.MethodPost, "/outbox/dead/retry", []string{"site"}, false},
		{plugins.RoleScoped, http.MethodGet, "/stats", []string{"viewer"}, true},
		{plugins.RoleScoped, http.MethodDelete, "/torrents/" + hash, []string{"viewer"}, false},
		{plugins.RoleScoped, http.MethodPut, "/torrents/" + hash, []string{"admin"}, false},
		{plugins.RoleScoped, http.MethodPut, "/torrents/" + hash, nil, false},
	} {
		resp, err := api.HandleRequest(t.Context(), plugins.Request{Method: c.method, Path: c.path, Role: c.role, Scopes: c.scopes,
			Body: []byte(`{}`), Header: http.Header{"Content-Type": {"application/json"}}})
		require.NoError(t, err)
		what := c.role + " " + strings.Join(c.scopes, ",") + " " + c.method + " " + c.path
		if c.allowed {
			require.NotEqual(t, http.StatusForbidden, resp.Status, "%s: %s", what, resp.Body)
			continue
		}
		require.Equal(t, http.StatusForbidden, resp.Status, "%s: %s", what, resp.Body)
		var body struct{ Code string }
		require.NoError(t, json.Unmarshal(resp.Body, &body))
		require.Equal(t, "forbidden", body.Code)
		require.Empty(t, resp.Changes, "%s: a refused call changes nothing", what)
	}
}
