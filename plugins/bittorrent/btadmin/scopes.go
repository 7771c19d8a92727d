package btadmin

import "github.com/hoardproject/hoard/plugins"

// Scopes are the roles an operator may give an account over the
// plugin's admin API ("plugin:bittorrent:<scope>"), below its root
// (/api/v1/plugins/bittorrent, or the older /api/v1/bittorrent): "site"
// for a site's service account, which manages torrents and users and
// consumes the outbox, and nothing of the work queue; "viewer" to read
// everything. They live beside the routes they open; the plugin declares
// them to the host (Description.AdminScopes) and checks them again on
// every scoped call (API.HandleRequest).
var Scopes = []plugins.AdminScope{
	{Name: "site", Help: "register torrents and users, set credit windows, read and acknowledge the outbox", Routes: []plugins.ScopeRoute{
		{Prefix: "/torrents/"},
		{Prefix: "/users/"},
		// Site-wide freeleech windows are the site's to set (issue 28).
		{Prefix: "/credit/"},
		{Methods: []string{"GET"}, Prefix: "/outbox/"},
		{Methods: []string{"POST"}, Prefix: "/outbox/ack"},
	}},
	{Name: "viewer", Help: "read every view of the tracker, change nothing", Routes: []plugins.ScopeRoute{
		{Methods: []string{"GET", "HEAD"}, Prefix: "/"},
	}},
}
