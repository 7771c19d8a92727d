package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/plugins"
)

// Every admin call is authenticated (who: an account, through one of its
// tokens, or the bootstrap admin token) and then authorised (may that
// account's roles make this call?) by the route it matched: accessRules
// gives each admin route one rule, and a route without one is refused to
// everyone but an admin, so a route added later without a rule is never
// open by mistake (TestEveryAdminRouteHasARule fails on it).

// BootstrapActor is the name the admin log gives the holder of
// HOARD_ADMIN_TOKEN. No account can have it (account names are lower
// case), so the log never confuses the two.
const BootstrapActor = "HOARD_ADMIN_TOKEN"

// InsecureActor is the actor of every call when the admin API runs
// without a token (--insecure-no-admin-token, development only).
const InsecureActor = "INSECURE-NO-ADMIN-TOKEN"

// Authenticator finds the account a token, or a web admin session,
// belongs to (accounts.Store).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (accounts.Principal, error)
	AuthenticateHash(ctx context.Context, hash string) (accounts.Principal, error)
	CreateSession(ctx context.Context, tokenHash string, bootstrap bool, idle time.Duration) (string, accounts.Session, error)
	Session(ctx context.Context, cookie string, idle time.Duration) (accounts.Session, error)
	EndSession(ctx context.Context, cookie string) error
}

// access is what a route asks of the caller's roles.
type access int

const (
	// accessAdmin: admin only (accounts, global blocks, creating projects).
	accessAdmin access = iota
	// accessProjectRead: a role that may read the route's :slug.
	accessProjectRead
	// accessProjectWrite: a role that may change the route's :slug.
	accessProjectWrite
	// accessReadAll: admin or viewer:* (the whole admin log, global blocks).
	accessReadAll
	// accessAccount: any account; the handler limits what it shows or
	// changes to the caller's own (its tokens, the projects it may read).
	accessAccount
	// accessPlugin: admin, or a plugin role whose scope the plugin
	// declares for the method and the path below its root.
	accessPlugin
)

func (a access) String() string {
	return [...]string{"admin", "project read", "project write", "admin or viewer:*", "any account", "plugin scope"}[a]
}

// accessRules maps "METHOD route" (gin's route pattern below /api/v1) to
// what it needs. Plugin routes are matched by prefix (pluginRoute).
var accessRules = map[string]access{
	// Go's profiles show the process's memory and goroutines: admins only.
	"GET " + pprofPrefix + "/*profile":         accessAdmin,
	"POST " + pprofPrefix + "/*profile":        accessAdmin,
	"GET /whoami":                              accessAccount,
	"GET /accounts":                            accessAdmin,
	"POST /accounts":                           accessAdmin,
	"GET /accounts/:name":                      accessAdmin,
	"PATCH /accounts/:name":                    accessAdmin,
	"DELETE /accounts/:name":                   accessAdmin,
	"GET /tokens":                              accessAccount,
	"POST /tokens":                             accessAccount,
	"DELETE /tokens/:id":                       accessAccount,
	"GET /projects":                            accessAccount,
	"POST /projects/:slug":                     accessAdmin,
	"GET /projects/:slug":                      accessProjectRead,
	"PATCH /projects/:slug":                    accessProjectWrite,
	"DELETE /projects/:slug":                   accessProjectWrite,
	"GET /projects/:slug/claims":               accessProjectRead,
	"GET /projects/:slug/claims/export":        accessProjectRead,
	"GET /projects/:slug/counts":               accessProjectRead,
	"GET /projects/:slug/stats":                accessProjectRead,
	"GET /projects/:slug/doctor":               accessProjectRead,
	"POST /projects/:slug/items":               accessProjectWrite,
	"POST /projects/:slug/import":              accessProjectWrite,
	"POST /projects/:slug/claims/release":      accessProjectWrite,
	"GET /projects/:slug/blocks":               accessProjectRead,
	"PUT /projects/:slug/blocks/:who":          accessProjectWrite,
	"DELETE /projects/:slug/blocks/:who":       accessProjectWrite,
	"PUT /projects/:slug/limit-groups":         accessProjectWrite,
	"POST /projects/:slug/queues/move":         accessProjectWrite,
	"POST /projects/:slug/queues/reroute":      accessProjectWrite,
	"GET /projects/:slug/log":                  accessProjectRead,
	"GET /projects/:slug/segments":             accessProjectRead,
	"POST /projects/:slug/segments/move":       accessProjectWrite,
	"GET /projects/:slug/queues/:queue/export": accessProjectRead,
	"GET /projects/:slug/archive/export":       accessProjectRead,
	"GET /projects/:slug/failed":               accessProjectRead,
	"GET /projects/:slug/failed/export":        accessProjectRead,
	"POST /projects/:slug/failed/requeue":      accessProjectWrite,
	"POST /projects/:slug/failed/delete":       accessProjectWrite,
	"GET /projects/:slug/filters":              accessProjectRead,
	"POST /projects/:slug/filters":             accessProjectWrite,
	"DELETE /projects/:slug/filters/:name":     accessProjectWrite,
	"POST /projects/:slug/filters/sift":        accessProjectWrite,
	"GET /blocks":                              accessReadAll,
	"PUT /blocks/:who":                         accessAdmin,
	"DELETE /blocks/:who":                      accessAdmin,
	"GET /log":                                 accessReadAll,
	// Deletes function libraries every project's scripts share.
	"POST /functions/prune": accessAdmin,
	// Running a plugin's job now (the plugin boundary's route).
	"POST /jobs/:plugin/:job/run": accessAdmin,
	// The plugins' web admin pages; the handler lists only the sections
	// the caller's roles may call.
	"GET /plugin-pages": accessAccount,
}

// pluginRoute tells a plugin's admin route by its pattern: the plugin's
// name and the path below its root, or ok false for any other route.
// /api/v1/plugins/<name>/… is the plugin boundary's forwarded API;
// /api/v1/bittorrent/… the BitTorrent plugin's (older) path.
func pluginRoute(c *gin.Context) (name, sub string, ok bool) {
	route, _ := strings.CutPrefix(c.FullPath(), adminPrefix)
	path, _ := strings.CutPrefix(c.Request.URL.Path, adminPrefix)
	switch {
	case strings.HasPrefix(route, "/plugins/:plugin/"):
		name = c.Param("plugin")
		sub, _ = strings.CutPrefix(path, "/plugins/"+name)
		return name, sub, true
	case strings.HasPrefix(route, "/bittorrent/"):
		sub, _ = strings.CutPrefix(path, "/bittorrent")
		return "bittorrent", sub, true
	}
	return "", "", false
}

// adminPrefix is where the admin API is mounted.
const adminPrefix = "/api/v1"

// principalKey holds the caller's accounts.Principal in the gin context.
const principalKey = "hoard.principal"

// principal is the caller of an authenticated admin call.
func principal(c *gin.Context) accounts.Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(accounts.Principal)
	return pr
}

// actor is who made a change, for the admin log: the account the call
// authenticated as, never something the client declares.
func actor(c *gin.Context) string {
	if name := principal(c).Account; name != "" {
		return name
	}
	return "unknown"
}

// auth authenticates and authorises admin calls.
type auth struct {
	token    string
	insecure bool
	accounts Authenticator
	limiter  *failureLimiter
	// idle is how long a web admin session lasts unused.
	idle time.Duration
	// secureCookie marks the session cookie Secure even on a plain
	// connection (hoard behind a TLS-terminating proxy).
	secureCookie bool
	// scopes reads the plugins' declared admin scopes (nil: none).
	scopes func(plugin string) []plugins.AdminScope
	logger *slog.Logger
}

// middleware authenticates the call, then checks the route's rule.
func (a *auth) middleware(c *gin.Context) {
	p, ok := a.authenticate(c)
	if !ok {
		c.Abort()
		return
	}
	c.Set(principalKey, p)
	if err := a.authorize(c, p); err != nil {
		_ = c.Error(err)
		c.Abort()
		return
	}
	c.Next()
}

// authenticate finds who calls; on failure it has recorded the error.
func (a *auth) authenticate(c *gin.Context) (accounts.Principal, bool) {
	admin := accounts.Roles{{Kind: accounts.KindAdmin}}
	// Without the bootstrap token the admin API is off (its accounts
	// included): the first run is one command with HOARD_ADMIN_TOKEN set.
	if a.token == "" {
		if a.insecure {
			return accounts.Principal{Account: InsecureActor, Roles: admin}, true
		}
		_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "admin_disabled",
			Message: "the admin API is disabled: start hoard with HOARD_ADMIN_TOKEN set"})
		return accounts.Principal{}, false
	}
	addr := c.ClientIP()
	if wait := a.limiter.blocked(addr); wait > 0 {
		_ = c.Error(&httpError{Status: http.StatusTooManyRequests, Code: "too_many_failures",
			Message: "too many failed sign-ins from this address; wait " + wait.Round(1e9).String()})
		c.Header("Retry-After", retryAfter(wait))
		return accounts.Principal{}, false
	}
	if c.GetHeader("Authorization") == "" {
		if cookie, err := c.Cookie(SessionCookie); err == nil && cookie != "" {
			return a.fromSession(c, cookie)
		}
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if ok && got != "" {
		p, err := a.check(c.Request.Context(), got)
		if err == nil {
			return p, true
		}
		if !errors.Is(err, accounts.ErrNotFound) {
			a.unavailable(c, err)
			return accounts.Principal{}, false
		}
		a.limiter.fail(addr)
		// The token is never logged: only that a wrong one came, and from
		// where.
		a.logger.WarnContext(c.Request.Context(), "admin call with a wrong token", "addr", addr,
			"method", c.Request.Method, "route", loggablePath(c))
	}
	c.Header("WWW-Authenticate", `Bearer realm="hoard admin"`)
	_ = c.Error(&httpError{Status: http.StatusUnauthorized, Code: "unauthorized",
		Message: "missing, wrong, revoked or expired token (send Authorization: Bearer <token>: an account's token or HOARD_ADMIN_TOKEN)"})
	return accounts.Principal{}, false
}

// check finds who a token belongs to: the bootstrap admin (compared in
// constant time) or an account; accounts.ErrNotFound for neither.
func (a *auth) check(ctx context.Context, token string) (accounts.Principal, error) {
	if a.token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(a.token)) == 1 {
		return accounts.Principal{Account: BootstrapActor, Roles: accounts.Roles{{Kind: accounts.KindAdmin}}}, nil
	}
	if a.accounts == nil {
		return accounts.Principal{}, accounts.ErrNotFound
	}
	return a.accounts.Authenticate(ctx, token)
}

// unavailable answers a call whose credentials could not be checked. The
// error carries no token: the accounts store never puts one in.
func (a *auth) unavailable(c *gin.Context, err error) {
	_ = c.Error(&httpError{Status: http.StatusServiceUnavailable, Code: "unavailable",
		Message: "cannot check the credentials now (redis is unavailable)"})
	a.logger.ErrorContext(c.Request.Context(), "admin authentication failed", "err", err)
}

// forbidden is the refusal of a call a role does not allow. It names the
// account, its roles and what the route needs, so the CLI can say plainly
// why; it names the route by its pattern, never the path, which may carry
// a secret (a passkey).
func forbidden(c *gin.Context, p accounts.Principal, needs string) error {
	return &httpError{Status: http.StatusForbidden, Code: "forbidden",
		Message: "account " + p.Account + " (" + p.Roles.Describe() + ") may not " + c.Request.Method + " " +
			c.FullPath() + ": that needs " + needs}
}

// authorize checks p's roles against the route's rule.
func (a *auth) authorize(c *gin.Context, p accounts.Principal) error {
	if p.Roles.Admin() {
		return nil
	}
	if name, sub, ok := pluginRoute(c); ok {
		for _, scope := range p.Roles.PluginScopes(name) {
			for _, declared := range a.pluginScopes(name) {
				if declared.Name == scope && declared.Allows(c.Request.Method, sub) {
					return nil
				}
			}
		}
		return forbidden(c, p, "admin, or a plugin:"+name+":<scope> role whose scope the plugin opens to this call")
	}
	rule, ok := accessRules[c.Request.Method+" "+strings.TrimPrefix(c.FullPath(), adminPrefix)]
	if !ok {
		a.logger.ErrorContext(c.Request.Context(), "admin route without an access rule: refused to all but admins",
			"method", c.Request.Method, "route", c.FullPath())
		return forbidden(c, p, "admin (the route has no access rule)")
	}
	slug := c.Param("slug")
	switch rule {
	case accessAccount:
		return nil
	case accessProjectRead:
		if p.Roles.CanRead(slug) {
			return nil
		}
		return forbidden(c, p, "admin, project-admin:"+slug+", viewer:"+slug+" or viewer:*")
	case accessProjectWrite:
		if p.Roles.CanWrite(slug) {
			return nil
		}
		return forbidden(c, p, "admin or project-admin:"+slug)
	case accessReadAll:
		if p.Roles.ReadsAll() {
			return nil
		}
		return forbidden(c, p, "admin or viewer:*")
	}
	return forbidden(c, p, "admin")
}

func (a *auth) pluginScopes(name string) []plugins.AdminScope {
	if a.scopes == nil {
		return nil
	}
	return a.scopes(name)
}

// pluginScopes reads each plugin's declared admin scopes from its last
// description (kept by the host while the plugin is down).
func pluginScopes(source PluginSource) func(string) []plugins.AdminScope {
	if source == nil {
		return nil
	}
	return func(name string) []plugins.AdminScope {
		for _, st := range source.Status() {
			if st.Name == name {
				return st.Description.AdminScopes
			}
		}
		return nil
	}
}
