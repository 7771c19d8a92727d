package plugins

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
)

// A plugin serves its own HTTP API (admin calls and the data of its
// pages) through HandleRequest, the way Vault's logical.Backend serves
// HandleRequest: the host owns the listener, authenticates the caller,
// records who made a change and forwards the call; the plugin owns the
// routes, the storage and the answer. The host adds nothing of the
// plugin's, so a plugin of another version, or one with another storage
// layout, is served the same way.

// Roles of a forwarded call.
const (
	// RoleAdmin: the caller is an admin (an account with the admin role,
	// or the bootstrap token); every route of the plugin's admin API is
	// open to it.
	RoleAdmin = "admin"
	// RoleScoped: the caller holds only plugin-scoped roles
	// ("plugin:<name>:<scope>"), listed in Request.Scopes. The host has
	// checked that one of them opens the call; the plugin checks again
	// (Request.Permitted) so a host bug cannot widen a scope. A plugin
	// built before scoped roles answers 404 to any role it does not know,
	// so an older plugin refuses scoped callers rather than serving them
	// as admins.
	RoleScoped = "scoped"
	// RolePublic: an anonymous caller of a public page's data (the host's
	// GET /tracker/<plugin>.json); a plugin answers it from bounded,
	// cached reads, and never changes anything for it.
	RolePublic = "public"
)

// PagePath is the path of a plugin's page data: the host forwards the
// public GET /tracker/<plugin>.json to it with RolePublic.
const PagePath = "/page.json"

// Limits on a forwarded call, so neither side allocates without bound
// (gRPC's default message limit is 4 MiB).
const (
	MaxRequestBody  = 1 << 20
	MaxResponseBody = 3 << 20
	MaxChanges      = 1000
)

// Request is one HTTP call the host forwards to a plugin.
type Request struct {
	Method string `json:"method"`
	// Path is below the plugin's root ("/api/v1/plugins/<name>" for
	// RoleAdmin), starting with "/", as sent: still escaped, so an
	// escaped "/" inside a segment stays one segment.
	Path string `json:"path"`
	// Query is the raw query string, without "?".
	Query string `json:"query,omitempty"`
	// Header is the caller's headers the plugin may need (Content-Type);
	// the host never forwards its own credentials.
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Actor is who makes the call, as the host recorded it ("site@web1
	// from 192.0.2.1"); "" for RolePublic.
	Actor string `json:"actor,omitempty"`
	// Role is RoleAdmin, RoleScoped or RolePublic.
	Role string `json:"role"`
	// Scopes are the caller's scopes in this plugin when Role is
	// RoleScoped (the <scope> of its "plugin:<name>:<scope>" roles), and
	// empty otherwise.
	Scopes []string `json:"scopes,omitempty"`
}

// Permitted reports whether the caller may make this call of the
// plugin's admin API, given the scopes the plugin declares
// (Description.AdminScopes): an admin may make any, a scoped caller one
// that a scope it holds opens, a public caller none. The path is read as
// the plugin's router reads it (unescaped), so an escaped segment cannot
// pass for another prefix.
func (r Request) Permitted(declared []AdminScope) bool {
	switch r.Role {
	case RoleAdmin:
		return true
	case RoleScoped:
	default:
		return false
	}
	parsed, err := url.Parse(r.Path)
	if err != nil {
		return false
	}
	for _, s := range declared {
		if slices.Contains(r.Scopes, s.Name) && s.Allows(r.Method, parsed.Path) {
			return true
		}
	}
	return false
}

// ForbiddenResponse is the answer of a plugin to a call the caller's
// role does not permit, in the error format of hoard's own API.
func ForbiddenResponse(req Request) Response {
	body, _ := json.Marshal(map[string]string{"error": "role " + req.Role + " may not " + req.Method + " " + req.Path, "code": "forbidden"})
	return Response{Status: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, Body: body}
}

// Response is a plugin's answer to a Request.
type Response struct {
	// Status is the HTTP status (0 is read as 200).
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Changes are what the call changed, one entry per change: the host
	// records each in its admin log with the actor, beside the changes
	// made through hoard's own admin API.
	Changes []Change `json:"changes,omitempty"`
}

// Change is one change a forwarded call made.
type Change struct {
	What string `json:"what"`
	// Details is a JSON object (secrets already redacted by the plugin).
	Details json.RawMessage `json:"details,omitempty"`
}

// NotFoundResponse is the answer of a plugin that serves no such route,
// in the error format of hoard's own API.
func NotFoundResponse(req Request) Response {
	body, _ := json.Marshal(map[string]string{"error": "no route " + req.Method + " " + req.Path, "code": "not_found"})
	return Response{Status: http.StatusNotFound, Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}}, Body: body}
}
