package plugins_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
)

func TestDescriptionValidate(t *testing.T) {
	good := plugins.Description{
		ItemTypes: []plugins.ItemType{
			{Name: "reap-notice", Project: "bt-reaper", ItemPrefix: "notify:"},
			{Name: "reap-remove", Project: "bt-reaper", ItemPrefix: "remove:"},
		},
		Jobs: []plugins.Job{{Name: "reaper", Period: 4 * time.Hour}},
	}
	require.NoError(t, good.Validate())
	for _, tc := range []struct {
		desc plugins.Description
		want string
	}{
		{plugins.Description{ItemTypes: []plugins.ItemType{{Name: "Bad", Project: "p"}}}, `item type name "Bad"`},
		{plugins.Description{ItemTypes: []plugins.ItemType{{Name: "a", Project: "{p}"}}}, `project "{p}" must be 1-64`},
		{plugins.Description{ItemTypes: []plugins.ItemType{{Name: "a", Project: "p"}, {Name: "a", Project: "q"}}}, "described twice"},
		{plugins.Description{ItemTypes: []plugins.ItemType{{Name: "a", Project: "p", ItemPrefix: "x"}, {Name: "b", Project: "p", ItemPrefix: "x"}}}, "both own prefix"},
		{plugins.Description{ItemTypes: []plugins.ItemType{{Name: "a", Project: "p", ItemPrefix: "x\n"}}}, "NUL, CR or LF"},
		{plugins.Description{Jobs: []plugins.Job{{Name: "j", Period: time.Millisecond}}}, "shorter than 1s"},
		{plugins.Description{Jobs: []plugins.Job{{Name: "j", Period: time.Hour}, {Name: "j", Period: time.Hour}}}, `job "j" is described twice`},
	} {
		require.ErrorContains(t, tc.desc.Validate(), tc.want)
	}
}

func TestAdminScopeAllows(t *testing.T) {
	scope := plugins.AdminScope{Name: "site", Routes: []plugins.ScopeRoute{
		{Prefix: "/torrents/"},
		{Methods: []string{"GET"}, Prefix: "/outbox/"},
	}}
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{"PUT", "/torrents/abc", true},
		{"DELETE", "/torrents/abc/trackers", true},
		{"GET", "/outbox/events", true},
		{"POST", "/outbox/ack", false},
		{"GET", "/torrents", false},
		{"GET", "/users/x", false},
		{"GET", "/torrents/../users/x", false},
		{"GET", "/torrents/./x", false},
		{"GET", "/torrents//x", false},
		{"GET", "/torrents/a\\..\\users", false},
		{"GET", "torrents/x", false},
		{"GET", "", false},
	} {
		require.Equal(t, c.want, scope.Allows(c.method, c.path), "%s %s", c.method, c.path)
	}
}

func TestDescriptionValidatesAdminScopes(t *testing.T) {
	ok := plugins.Description{AdminScopes: []plugins.AdminScope{{Name: "site", Routes: []plugins.ScopeRoute{{Methods: []string{"GET"}, Prefix: "/torrents/"}}}}}
	require.NoError(t, ok.Validate())
	for _, c := range []struct {
		scopes []plugins.AdminScope
		says   string
	}{
		{[]plugins.AdminScope{{Name: "Site", Routes: []plugins.ScopeRoute{{Prefix: "/"}}}}, `admin scope name "Site"`},
		{[]plugins.AdminScope{{Name: "a", Routes: []plugins.ScopeRoute{{Prefix: "/"}}}, {Name: "a", Routes: []plugins.ScopeRoute{{Prefix: "/"}}}}, "described twice"},
		{[]plugins.AdminScope{{Name: "a"}}, "opens no route"},
		{[]plugins.AdminScope{{Name: "a", Routes: []plugins.ScopeRoute{{Prefix: "torrents/"}}}}, "must start with /"},
		{[]plugins.AdminScope{{Name: "a", Routes: []plugins.ScopeRoute{{Methods: []string{"get"}, Prefix: "/"}}}}, `method "get"`},
	} {
		require.ErrorContains(t, plugins.Description{AdminScopes: c.scopes}.Validate(), c.says)
	}
}

// TestRequestPermitted: a plugin's own check of a forwarded call: an
// admin may make any call, a scoped caller only what a scope it holds
// opens (read on the unescaped path, as the plugin's router reads it), a
// public caller or an unknown role none.
func TestRequestPermitted(t *testing.T) {
	declared := []plugins.AdminScope{
		{Name: "site", Routes: []plugins.ScopeRoute{{Prefix: "/torrents/"}, {Methods: []string{"GET"}, Prefix: "/outbox/"}}},
		{Name: "viewer", Routes: []plugins.ScopeRoute{{Methods: []string{"GET"}, Prefix: "/"}}},
	}
	for _, c := range []struct {
		role   string
		scopes []string
		method string
		path   string
		want   bool
	}{
		{plugins.RoleAdmin, nil, "POST", "/anything", true},
		{plugins.RoleScoped, []string{"site"}, "PUT", "/torrents/ab", true},
		{plugins.RoleScoped, []string{"site"}, "GET", "/outbox/events", true},
		{plugins.RoleScoped, []string{"site"}, "POST", "/outbox/dead/retry", false},
		{plugins.RoleScoped, []string{"site"}, "GET", "/stats", false},
		{plugins.RoleScoped, []string{"viewer"}, "GET", "/stats", true},
		{plugins.RoleScoped, []string{"viewer"}, "DELETE", "/torrents/ab", false},
		{plugins.RoleScoped, []string{"site", "viewer"}, "GET", "/stats", true},
		{plugins.RoleScoped, []string{"nosuch"}, "GET", "/stats", false},
		{plugins.RoleScoped, nil, "GET", "/torrents/ab", false},
		{plugins.RoleScoped, []string{"site"}, "PUT", "/%74orrents/ab", true},
		{plugins.RoleScoped, []string{"site"}, "PUT", "/torrents/a%2F..%2F..%2Fusers", false},
		{plugins.RoleScoped, []string{"site"}, "PUT", "/torrents/%zz", false},
		{plugins.RolePublic, []string{"site"}, "GET", "/torrents/ab", false},
		{"root", []string{"site"}, "GET", "/torrents/ab", false},
	} {
		req := plugins.Request{Role: c.role, Scopes: c.scopes, Method: c.method, Path: c.path}
		require.Equal(t, c.want, req.Permitted(declared), "%s %v %s %s", c.role, c.scopes, c.method, c.path)
	}
	forbidden := plugins.ForbiddenResponse(plugins.Request{Role: plugins.RoleScoped, Method: "GET", Path: "/stats"})
	require.Equal(t, 403, forbidden.Status)
	require.JSONEq(t, `{"error":"role scoped may not GET /stats","code":"forbidden"}`, string(forbidden.Body))
}

// TestDescriptionValidatesAdminPages: a page declaration the console
// could not render, or that names a path field it does not fill, is
// refused with what is wrong.
func TestDescriptionValidatesAdminPages(t *testing.T) {
	form := plugins.PageSection{Title: "show", Kind: plugins.SectionForm, Method: "GET", Path: "/torrents/{infohash}",
		Fields: []plugins.PageField{{Name: "infohash", In: plugins.FieldInPath}, {Name: "days", Type: "number"}}}
	table := plugins.PageSection{Title: "top", Kind: plugins.SectionTable, Path: "/top", Rows: "torrents",
		Fields: []plugins.PageField{{Name: "n", In: plugins.FieldInQuery}}}
	ok := plugins.Description{AdminPages: []plugins.AdminPage{{Name: "torrents", Title: "Torrents", Sections: []plugins.PageSection{form, table}}}}
	require.NoError(t, ok.Validate())
	require.Equal(t, "/torrents/infohash", form.SamplePath())
	require.Equal(t, "GET", table.CallMethod())
	page := func(s ...plugins.PageSection) []plugins.AdminPage {
		return []plugins.AdminPage{{Name: "p", Sections: s}}
	}
	for _, c := range []struct {
		pages []plugins.AdminPage
		says  string
	}{
		{[]plugins.AdminPage{{Name: "P", Sections: []plugins.PageSection{table}}}, `admin page name "P"`},
		{[]plugins.AdminPage{{Name: "p", Sections: []plugins.PageSection{table}}, {Name: "p", Sections: []plugins.PageSection{table}}}, "described twice"},
		{page(), "has no section"},
		{page(plugins.PageSection{Title: "x", Kind: "chart", Path: "/"}), `kind "chart"`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionTable, Method: "POST", Path: "/"}), "reads with GET"},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Method: "TRACE", Path: "/"}), `method "TRACE"`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionTable, Path: "top"}), "must start with /"},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionTable, Path: "/top?n=1"}), "hold no query"},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t/{id}"}), "{id} in the path is not a path field"},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t", Fields: []plugins.PageField{{Name: "id", In: "path"}}}), `path field "id" is not in the path`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionTable, Path: "/t", Fields: []plugins.PageField{{Name: "id"}}}), "takes query fields only"},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t", Fields: []plugins.PageField{{Name: "a", Type: "date"}}}), `type "date"`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t", Fields: []plugins.PageField{{Name: "a", In: "header"}}}), `in "header"`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t", Fields: []plugins.PageField{{Name: "a"}, {Name: "a"}}}), `field "a" is described twice`},
		{page(plugins.PageSection{Title: "x", Kind: plugins.SectionForm, Path: "/t", Fields: []plugins.PageField{{Name: "A b"}}}), `field name "A b"`},
	} {
		require.ErrorContains(t, plugins.Description{AdminPages: c.pages}.Validate(), c.says)
	}
}
