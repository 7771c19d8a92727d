package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// What each admin route asks of the caller, written out here apart from
// the server's own rules (auth.go), so the test checks them rather than
// repeating them. A route the router has and this table lacks fails the
// test: whoever adds a route decides, here and in accessRules, who may
// call it.
const (
	needAdmin   = "admin"
	needRead    = "read"    // a reader of the route's project
	needWrite   = "write"   // a project-admin of the route's project
	needReadAll = "readall" // admin or viewer:*
	needAccount = "account" // any account
	needSite    = "site"    // admin or plugin:bittorrent:site (the test plugin's scope below)
	needPlugin  = "plugin"  // admin only: no scope of the test plugin opens it
)

var routeNeeds = map[string]string{
	"GET /whoami":                              needAccount,
	"GET /accounts":                            needAdmin,
	"POST /accounts":                           needAdmin,
	"GET /accounts/:name":                      needAdmin,
	"PATCH /accounts/:name":                    needAdmin,
	"DELETE /accounts/:name":                   needAdmin,
	"GET /tokens":                              needAccount,
	"POST /tokens":                             needAccount,
	"DELETE /tokens/:id":                       needAccount,
	"GET /projects":                            needAccount,
	"POST /projects/:slug":                     needAdmin,
	"GET /projects/:slug":                      needRead,
	"PATCH /projects/:slug":                    needWrite,
	"DELETE /projects/:slug":                   needWrite,
	"GET /projects/:slug/claims":               needRead,
	"GET /projects/:slug/claims/export":        needRead,
	"GET /projects/:slug/counts":               needRead,
	"GET /projects/:slug/stats":                needRead,
	"GET /projects/:slug/doctor":               needRead,
	"POST /projects/:slug/items":               needWrite,
	"POST /projects/:slug/import":              needWrite,
	"POST /projects/:slug/claims/release":      needWrite,
	"GET /projects/:slug/blocks":               needRead,
	"PUT /projects/:slug/blocks/:who":          needWrite,
	"DELETE /projects/:slug/blocks/:who":       needWrite,
	"PUT /projects/:slug/limit-groups":         needWrite,
	"POST /projects/:slug/queues/move":         needWrite,
	"POST /projects/:slug/queues/reroute":      needWrite,
	"GET /projects/:slug/log":                  needRead,
	"GET /projects/:slug/segments":             needRead,
	"POST /projects/:slug/segments/move":       needWrite,
	"GET /projects/:slug/queues/:queue/export": needRead,
	"GET /projects/:slug/archive/export":       needRead,
	"GET /projects/:slug/failed":               needRead,
	"GET /projects/:slug/failed/export":        needRead,
	"POST /projects/:slug/failed/requeue":      needWrite,
	"POST /projects/:slug/failed/delete":       needWrite,
	"GET /projects/:slug/filters":              needRead,
	"POST /projects/:slug/filters":             needWrite,
	"DELETE /projects/:slug/filters/:name":     needWrite,
	"POST /projects/:slug/filters/sift":        needWrite,
	"POST /functions/prune":                    needAdmin,
	"GET /blocks":                              needReadAll,
	"PUT /blocks/:who":                         needAdmin,
	"DELETE /blocks/:who":                      needAdmin,
	"GET /log":                                 needReadAll,
	"POST /jobs/:plugin/:job/run":              needAdmin,
	"GET /plugin-pages":                        needAccount,
	// The BitTorrent plugin's admin API: the test plugin declares a scope
	// "site" that opens /torrents/ and GET /outbox/.
	"PUT /bittorrent/torrents/:infohash":             needSite,
	"DELETE /bittorrent/torrents/:infohash":          needSite,
	"GET /bittorrent/torrents/:infohash":             needSite,
	"GET /bittorrent/torrents/:infohash/trackers":    needSite,
	"PUT /bittorrent/torrents/:infohash/trackers":    needSite,
	"DELETE /bittorrent/torrents/:infohash/trackers": needSite,
	"GET /bittorrent/torrents/:infohash/score":       needSite,
	"PUT /bittorrent/users/:passkey":                 needPlugin,
	"DELETE /bittorrent/users/:passkey":              needPlugin,
	"GET /bittorrent/users/by-id/:user_id":           needPlugin,
	"GET /bittorrent/clients":                        needPlugin,
	"PUT /bittorrent/clients/*prefix":                needPlugin,
	"DELETE /bittorrent/clients/*prefix":             needPlugin,
	"GET /bittorrent/stats":                          needPlugin,
	"GET /bittorrent/top":                            needPlugin,
	"GET /bittorrent/scores/top":                     needPlugin,
	"GET /bittorrent/outbox/events":                  needSite,
	"POST /bittorrent/outbox/ack":                    needPlugin,
	"GET /bittorrent/outbox/stats":                   needSite,
	"GET /bittorrent/outbox/dead":                    needSite,
	"POST /bittorrent/outbox/dead/retry":             needPlugin,
	"POST /bittorrent/reaper/extend":                 needPlugin,
	"GET /bittorrent/reaper/preview":                 needPlugin,
	"GET /bittorrent/reaper/counts":                  needPlugin,
	"GET /bittorrent/reaper/torrents/:infohash":      needPlugin,
}

// The roles the test signs in as; "own" is the project the project roles
// name, "other" one they do not.
var testRoles = map[string][]string{
	"admin":      {"admin"},
	"padmin-own": {"project-admin:own"},
	"viewer-own": {"viewer:own"},
	"viewer-all": {"viewer:*"},
	"site":       {"plugin:bittorrent:site"},
	"norole":     {},
}

// allowed is the expectation: may role call a route that needs need, on
// project slug?
func allowed(role, need, slug string) bool {
	if role == "admin" {
		return true
	}
	switch need {
	case needAccount:
		return true
	case needRead:
		return role == "viewer-all" || (slug == "own" && (role == "padmin-own" || role == "viewer-own"))
	case needWrite:
		return slug == "own" && role == "padmin-own"
	case needReadAll:
		return role == "viewer-all"
	case needSite:
		return role == "site"
	}
	return false
}

// testPlugins is a plugin host with one plugin, "bittorrent", whose
// description declares the scope "site".
type testPlugins struct{}

func (testPlugins) Status() []pluginhost.Status {
	return []pluginhost.Status{{Name: "bittorrent", State: pluginhost.StateRunning, Description: plugins.Description{
		AdminScopes: []plugins.AdminScope{{Name: "site", Routes: []plugins.ScopeRoute{
			{Prefix: "/torrents/"},
			{Methods: []string{http.MethodGet}, Prefix: "/outbox/"},
		}}},
	}}}
}

func (testPlugins) Stats() map[string]plugins.Stats { return nil }

// fillRoute turns a route pattern into a path, with slug for :slug.
func fillRoute(route, slug string) string {
	values := map[string]string{":slug": slug, ":who": "tester9", ":name": "nobody-x", ":id": "0000000000000000",
		":queue": "todo", ":infohash": strings.Repeat("ab", 20), ":passkey": strings.Repeat("p", 32), ":user_id": "7",
		"*prefix": "qB", ":plugin": "bittorrent", ":job": "reaper", "*path": "torrents/x"}
	parts := strings.Split(route, "/")
	for i, p := range parts {
		if v, ok := values[p]; ok {
			parts[i] = v
		}
	}
	return strings.Join(parts, "/")
}

// TestEveryAdminRouteByRole calls every admin route the router has, as
// every role, on the role's own project and on another, and checks each
// call is refused with 403 exactly when the role may not make it (any
// other answer, 400 or 404 included, means the call got past the role
// check). A route without an entry in routeNeeds fails the test.
func TestEveryAdminRouteByRole(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		srv, err := server.New(server.Config{AdminToken: token, Logger: quiet, Plugins: testPlugins{},
			ProjectsFile: filepath.Join(t.TempDir(), "projects.json")}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(ts.Close)
		f := &fixture{t: t, ctx: t.Context(), engine: engine, clock: queues.NewFakeClock(engine.Clock().Now()), url: ts.URL, client: ts.Client()}
		for _, slug := range []string{"own", "other"} {
			f.project(slug, queues.SettingsPatch{})
		}
		tokens := map[string]string{}
		for role, roles := range testRoles {
			tokens[role] = f.accountToken("t-"+role, roles...)
		}

		routes := srv.Handler().(*gin.Engine).Routes()
		seen := 0
		for _, route := range routes {
			rel, ok := strings.CutPrefix(route.Path, "/api/v1/")
			if !ok {
				continue
			}
			key := route.Method + " /" + rel
			need, ok := routeNeeds[key]
			if !ok && pluginWildcard(rel) {
				// A plugin's forwarded API (any method): the test plugin's
				// scope "site" opens /torrents/, which *path is filled with.
				need, ok = needSite, true
			}
			require.True(t, ok, "admin route %s has no expectation in routeNeeds (and maybe no rule in accessRules): decide who may call it", key)
			seen++
			for role := range testRoles {
				for _, slug := range []string{"own", "other"} {
					r := f.admin(route.Method, "/"+fillRoute(rel, slug), "", tokens[role])
					var body struct{ Code string }
					_ = json.Unmarshal([]byte(r.body), &body)
					// A HEAD answer has no body to carry the code.
					refused := r.status == http.StatusForbidden && (body.Code == "forbidden" || route.Method == http.MethodHead)
					require.NotEqual(t, http.StatusUnauthorized, r.status, "%s as %s: %s", key, role, r.body)
					if allowed(role, need, slug) {
						require.False(t, refused, "%s as %s on %s should pass the role check: %s", key, role, slug, r.body)
					} else {
						require.True(t, refused, "%s as %s on %s should be refused with 403: %d %s", key, role, slug, r.status, r.body)
						if route.Method != http.MethodHead {
							require.Contains(t, r.body, "t-"+role, "the refusal names the account")
						}
					}
				}
			}
		}
		require.Greater(t, seen, 40, "the router's admin routes were found")
	})
}

// pluginWildcard reports whether a route is a plugin's forwarded API,
// served for every method under a wildcard (the plugin boundary).
func pluginWildcard(rel string) bool {
	return rel == "plugins/:plugin/*path" || rel == "bittorrent/*path"
}
