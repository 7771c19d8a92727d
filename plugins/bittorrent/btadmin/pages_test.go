package btadmin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// TestPagesNameRealRoutes: the tracker's web admin pages are a valid
// declaration, and every section calls a route this API serves (a
// section over a route that was renamed would show only an error).
func TestPagesNameRealRoutes(t *testing.T) {
	require.NoError(t, plugins.Description{AdminScopes: btadmin.Scopes, AdminPages: btadmin.Pages}.Validate())
	api := btadmin.NewAPI(&btadmin.Admin{}, &btadmin.MetricsAdmin{}, &btadmin.TrackerViews{}, quiet)
	sample := strings.NewReplacer("{infohash}", strings.Repeat("ab", 20), "{user_id}", "7", "{passkey}", strings.Repeat("p", 32))
	titles := map[string]bool{}
	for _, page := range btadmin.Pages {
		titles[page.Title] = true
		for _, s := range page.Sections {
			resp, err := api.HandleRequest(t.Context(), plugins.Request{Method: s.CallMethod(), Path: sample.Replace(s.Path),
				Role: plugins.RoleAdmin, Body: []byte(`{}`), Header: http.Header{"Content-Type": {"application/json"}}})
			require.NoError(t, err)
			require.NotEqual(t, "404 page not found", string(resp.Body), "%s %s: no such route", s.CallMethod(), s.Path)
			require.NotContains(t, string(resp.Body), `"code":"not_found"`, "%s %s", s.CallMethod(), s.Path)
		}
	}
	for _, want := range []string{"Torrents", "Users and clients", "Scoring", "Reaper", "Outbox"} {
		require.True(t, titles[want], "a page for %s", want)
	}
}
