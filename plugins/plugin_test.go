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
