package plugins

import (
	"encoding/json"
	"net/http"
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
	// RoleAdmin: the caller showed the admin token; every route of the
	// plugin's admin API is open to it.
	RoleAdmin = "admin"
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
	// Role is RoleAdmin or RolePublic.
	Role string `json:"role"`
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
