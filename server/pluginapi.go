package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// PluginAPI is what forwarding a plugin's own API needs of the plugin
// host (pluginhost.Host.HandleRequest).
type PluginAPI interface {
	HandleRequest(ctx context.Context, name string, req plugins.Request) (plugins.Response, error)
}

// PluginAccess keeps a plugin's work from the public (the plugin host):
// a project its item types live in is served to the warrior API only when
// every type there is public or the caller shows a worker token for them,
// and is left off the public project lists otherwise.
type PluginAccess interface {
	WarriorAccess(project, bearer string) (plugin string, owned, allowed bool)
	PrivateProject(project string) bool
}

// PluginJobs runs a plugin's job now (pluginhost.Host.RunJob).
type PluginJobs interface {
	RunJob(ctx context.Context, plugin, job string) error
}

// runJobTimeout bounds a run now: the tick's own timeout is the host's.
const runJobTimeout = 2 * time.Minute

// runJob serves POST /api/v1/jobs/:plugin/:job/run: an operator runs a
// plugin's job now instead of waiting for its period (it counts as the
// period's run), and the change log says who did.
func (f *pluginForwarder) runJob(c *gin.Context) {
	plugin, job := c.Param("plugin"), c.Param("job")
	if f.jobs == nil {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_plugin", Message: "this hoard runs no plugins"})
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), runJobTimeout)
	defer cancel()
	err := f.jobs.RunJob(ctx, plugin, job)
	switch {
	case errors.Is(err, pluginhost.ErrNoJob):
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_job", Message: "plugin " + plugin + " has no job " + strconv.Quote(job)})
		return
	case err != nil:
		herr := pluginCallError(plugin, err)
		if herr.Status == http.StatusBadGateway {
			herr.Message = "job " + job + " of plugin " + plugin + " failed: " + err.Error()
		}
		_ = c.Error(herr)
		return
	}
	f.recordChange(c, plugin, plugins.Change{What: "job run now", Details: json.RawMessage(`{"job":` + strconv.Quote(job) + `}`)})
	c.JSON(http.StatusOK, gin.H{"plugin": plugin, "job": job, "ran": true})
}

// pluginForwarder serves a plugin's own API and page data by forwarding
// them (Vault's logical.Backend.HandleRequest is the model):
//
//	ANY /api/v1/plugins/<name>/<path>   the plugin's admin API (an admin, or a plugin-scoped role)
//	ANY /api/v1/bittorrent/<path>       the same for the plugin "bittorrent" (the older path)
//	GET /tracker/<name>.json            the plugin's page data (public)
//
// The server authenticates, records the actor and the changes the plugin
// lists in the admin log, and adds nothing of the plugin's: routes,
// storage and answers are the plugin's.
type pluginForwarder struct {
	api    PluginAPI
	jobs   PluginJobs
	engine AdminEngine
	logger interface {
		InfoContext(ctx context.Context, msg string, args ...any)
		ErrorContext(ctx context.Context, msg string, args ...any)
	}
}

// forwardedHeaders are the request headers a plugin may read; the
// caller's credentials never reach it.
var forwardedHeaders = []string{"Content-Type", "Accept"}

// answeredHeaders are the headers of a plugin's answer the server passes
// on; anything else (cookies, hop-by-hop headers) is dropped.
var answeredHeaders = []string{"Content-Type", "Cache-Control", "Access-Control-Allow-Origin", "Retry-After", "Content-Disposition"}

// admin forwards /api/v1/plugins/:plugin/*path.
func (f *pluginForwarder) admin(c *gin.Context) { f.forwardAdmin(c, c.Param("plugin")) }

// alias forwards a fixed plugin's admin API from its own prefix.
func (f *pluginForwarder) alias(name string) gin.HandlerFunc {
	return func(c *gin.Context) { f.forwardAdmin(c, name) }
}

func (f *pluginForwarder) forwardAdmin(c *gin.Context, name string) {
	body, err := readBody(c, plugins.MaxRequestBody)
	if err != nil {
		_ = c.Error(err)
		return
	}
	req := plugins.Request{Method: c.Request.Method, Path: subPath(c), Query: c.Request.URL.RawQuery,
		Body: body, Actor: actor(c), Role: plugins.RoleAdmin, Header: http.Header{}}
	// The caller's own role goes with the call, never more: auth has let
	// a scoped caller through only for a route one of its scopes opens,
	// and the plugin checks the same again (plugins.Request.Permitted).
	if p := principal(c); !p.Roles.Admin() {
		req.Role, req.Scopes = plugins.RoleScoped, p.Roles.PluginScopes(name)
	}
	for _, h := range forwardedHeaders {
		if v := c.Request.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	f.forward(c, name, req)
}

// page forwards GET /tracker/<name>.json to the plugin's PagePath.
func (f *pluginForwarder) page(c *gin.Context) {
	name, ok := strings.CutSuffix(c.Param("page"), ".json")
	if !ok || plugins.ValidateName(name) != nil {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "not_found", Message: "no such page"})
		return
	}
	f.forward(c, name, plugins.Request{Method: http.MethodGet, Path: plugins.PagePath, Query: c.Request.URL.RawQuery,
		Role: plugins.RolePublic})
}

// subPath is the part of the path below the plugin's root, still
// escaped, so "/clients/a%2Fb" keeps its one segment.
func subPath(c *gin.Context) string {
	path := c.Param("path")
	if raw := c.Request.URL.EscapedPath(); raw != c.Request.URL.Path {
		// The route matched the unescaped path; cut the same number of
		// leading segments off the escaped one.
		prefix := strings.TrimSuffix(c.Request.URL.Path, path)
		cut := strings.Count(prefix, "/")
		if parts := strings.SplitN(raw, "/", cut+2); len(parts) == cut+2 {
			path = "/" + parts[cut+1]
		}
	}
	if path == "" || path[0] != '/' {
		path = "/"
	}
	return path
}

func (f *pluginForwarder) forward(c *gin.Context, name string, req plugins.Request) {
	if f.api == nil {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_plugin", Message: "this hoard runs no plugins"})
		return
	}
	resp, err := f.api.HandleRequest(c.Request.Context(), name, req)
	if err != nil {
		herr := pluginCallError(name, err)
		if herr.Status == http.StatusBadGateway {
			f.logger.ErrorContext(c.Request.Context(), "plugin call failed", "plugin", name, "method", req.Method, "err", err)
		}
		_ = c.Error(herr)
		return
	}
	for _, ch := range resp.Changes {
		f.recordChange(c, name, ch)
	}
	for _, h := range answeredHeaders {
		for _, v := range resp.Header.Values(h) {
			c.Writer.Header().Add(h, v)
		}
	}
	contentType := resp.Header.Get("Content-Type")
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	c.Data(resp.Status, contentType, resp.Body)
}

// recordChange writes one change a plugin made into hoard's log and the
// global admin log, with who made it.
func (f *pluginForwarder) recordChange(c *gin.Context, name string, ch plugins.Change) {
	what := name + ": " + ch.What
	details := ch.Details
	var object map[string]any
	if len(details) == 0 || json.Unmarshal(details, &object) != nil {
		details = json.RawMessage(`{}`)
	}
	f.logger.InfoContext(c.Request.Context(), "admin change: "+what, "plugin", name, "by", actor(c), "details", string(details))
	entry := queues.ChangeEntry{By: actor(c), What: what, Details: details}
	if err := f.engine.RecordChange(c.Request.Context(), "", entry); err != nil {
		f.logger.ErrorContext(c.Request.Context(), "could not record an admin change", "err", err)
	}
}

// pluginCallError turns a failed forward into the one error format. A
// plugin's own error stays in hoard's log: the caller of a public page
// must not read it.
func pluginCallError(name string, err error) *httpError {
	switch {
	case errors.Is(err, pluginhost.ErrNoPlugin):
		return &httpError{Status: http.StatusNotFound, Code: "no_plugin", Message: "no plugin " + name + " is configured"}
	case errors.Is(err, plugins.ErrNoAPI):
		return &httpError{Status: http.StatusNotImplemented, Code: "plugin_no_api", Message: "plugin " + name + " serves no API of its own (built before hoard forwarded plugin APIs)"}
	case errors.Is(err, plugins.ErrUnavailable), errors.Is(err, plugins.ErrBusy):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "plugin_unavailable", Message: "plugin " + name + ": " + err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &httpError{Status: http.StatusGatewayTimeout, Code: "plugin_timeout", Message: "plugin " + name + " did not answer in time"}
	}
	return &httpError{Status: http.StatusBadGateway, Code: "plugin_error", Message: "plugin " + name + " failed the call (see hoard's log)"}
}
