package server_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// pagesPlugins is a plugin host whose plugin "bittorrent" declares a
// scope "site" (torrents) and a page with a section the scope opens and
// one it does not.
type pagesPlugins struct{}

func (pagesPlugins) Status() []pluginhost.Status {
	return []pluginhost.Status{{Name: "bittorrent", State: pluginhost.StateRunning, Description: plugins.Description{
		AdminScopes: []plugins.AdminScope{{Name: "site", Routes: []plugins.ScopeRoute{{Prefix: "/torrents/"}}}},
		AdminPages: []plugins.AdminPage{{Name: "torrents", Title: "Torrents", Sections: []plugins.PageSection{
			{Title: "Totals", Kind: plugins.SectionObject, Path: "/stats"},
			{Title: "Register", Kind: plugins.SectionForm, Method: http.MethodPut, Path: "/torrents/{infohash}",
				Fields: []plugins.PageField{{Name: "infohash", In: plugins.FieldInPath}}},
		}}},
	}}}
}

func (pagesPlugins) Stats() map[string]plugins.Stats { return nil }

// TestPluginPagesShowOnlyWhatTheRoleMayCall: GET /api/v1/plugin-pages
// lists each plugin's pages with only the sections the caller may call,
// checked as the forwarder checks the call itself: an admin sees every
// section, a plugin:bittorrent:site account the one over /torrents/, and
// an account without a plugin role none.
func TestPluginPagesShowOnlyWhatTheRoleMayCall(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token, Plugins: pagesPlugins{}})
		f.project("own", queues.SettingsPatch{})
		sections := func(tok string) []string {
			t.Helper()
			r := f.admin(http.MethodGet, "/plugin-pages", "", tok)
			require.Equal(t, http.StatusOK, r.status, r.body)
			var got struct{ Plugins []server.PluginPages }
			require.NoError(t, json.Unmarshal([]byte(r.body), &got), r.body)
			titles := []string{}
			for _, p := range got.Plugins {
				require.Equal(t, "bittorrent", p.Name)
				require.Equal(t, "running", p.State)
				for _, page := range p.Pages {
					for _, s := range page.Sections {
						titles = append(titles, s.Title)
					}
				}
			}
			return titles
		}
		require.Equal(t, []string{"Totals", "Register"}, sections(token))
		require.Equal(t, []string{"Totals", "Register"}, sections(f.accountToken("ops", "admin")))
		require.Equal(t, []string{"Register"}, sections(f.accountToken("site-svc", "plugin:bittorrent:site")))
		require.Empty(t, sections(f.accountToken("own-viewer", "viewer:own")))
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/plugin-pages", "", "").status)

		// Without plugins the list is empty, not an error.
		bare := newFixture(t, b, server.Config{AdminToken: token})
		r := bare.admin(http.MethodGet, "/plugin-pages", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"plugins":[]}`, r.body)
	})
}
