package server

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/leaderboard"
)

// The web admin (/admin/) is one static page (leaderboard/assets/admin.*)
// that calls the same admin API the CLI calls. It signs in with a token
// once: the server answers with a session cookie (HttpOnly, so the
// page's script never holds the token or the cookie; SameSite=Strict, so
// another site's page does not send it; Secure behind TLS) and a CSRF
// value the page sends in CSRFHeader with every change, which another
// site cannot read. A session ends after its idle time or on sign out.
//
//	GET    /admin/          the page
//	POST   /admin/session   {"token": …} sign in: the cookie, and {account, roles, csrf}
//	GET    /admin/session   the session's account, roles and CSRF value (401 without one)
//	DELETE /admin/session   sign out (with the CSRF header)

// SessionCookie names the web admin's session cookie.
const SessionCookie = "hoard_session"

// CSRFHeader carries a session's CSRF value on every change.
const CSRFHeader = "X-Hoard-CSRF"

// SessionInfo answers the session calls.
type SessionInfo struct {
	Account string   `json:"account"`
	Roles   []string `json:"roles"`
	CSRF    string   `json:"csrf"`
}

// fromSession authenticates a call by its session cookie; a change must
// carry the session's CSRF value.
func (a *auth) fromSession(c *gin.Context, cookie string) (accounts.Principal, bool) {
	p, sess, err := a.session(c, cookie)
	if err != nil {
		if !errors.Is(err, accounts.ErrNotFound) {
			a.unavailable(c, err)
			return accounts.Principal{}, false
		}
		_ = c.Error(&httpError{Status: http.StatusUnauthorized, Code: "signed_out",
			Message: "the session has ended (signed out, idle too long, or its token was revoked): sign in again"})
		return accounts.Principal{}, false
	}
	if !safeMethod(c.Request.Method) && !a.csrfOK(c, sess) {
		return accounts.Principal{}, false
	}
	return p, true
}

// session reads a session and authenticates the token it stands for
// again, so a revoked token or a removed account ends it at once.
func (a *auth) session(c *gin.Context, cookie string) (accounts.Principal, accounts.Session, error) {
	if a.accounts == nil {
		return accounts.Principal{}, accounts.Session{}, accounts.ErrNotFound
	}
	sess, err := a.accounts.Session(c.Request.Context(), cookie, a.idle)
	if err != nil {
		return accounts.Principal{}, sess, err
	}
	if sess.Bootstrap {
		if a.token == "" || subtle.ConstantTimeCompare([]byte(sess.TokenHash), []byte(accounts.HashToken(a.token))) != 1 {
			return accounts.Principal{}, sess, accounts.ErrNotFound
		}
		return accounts.Principal{Account: BootstrapActor, Roles: accounts.Roles{{Kind: accounts.KindAdmin}}}, sess, nil
	}
	p, err := a.accounts.AuthenticateHash(c.Request.Context(), sess.TokenHash)
	return p, sess, err
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// csrfOK checks a change made in a session: it must carry the session's
// CSRF value, and come from this site when the browser says where from.
func (a *auth) csrfOK(c *gin.Context, sess accounts.Session) bool {
	got := c.GetHeader(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 || c.GetHeader("Sec-Fetch-Site") == "cross-site" {
		_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "csrf",
			Message: "a change made with a session cookie must come from the web admin's own page (missing or wrong " + CSRFHeader + ")"})
		return false
	}
	return true
}

func (a *auth) setCookie(c *gin.Context, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: a.secureCookie || c.Request.TLS != nil})
}

func (a *auth) registerWebAdmin(r *gin.Engine) {
	page := func(c *gin.Context) {
		h := c.Writer.Header()
		// The page loads only its own files and is never framed: no
		// injected script or stylesheet can run, whatever a name holds.
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		c.Data(http.StatusOK, "text/html; charset=utf-8", leaderboard.AdminPage())
	}
	r.GET("/admin/", page)
	r.GET("/admin", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/admin/") })
	r.POST("/admin/session", a.signIn)
	r.GET("/admin/session", a.showSession)
	r.DELETE("/admin/session", a.signOut)
}

func (a *auth) signIn(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	if a.token == "" || a.accounts == nil {
		_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "admin_disabled",
			Message: "the admin API is disabled: start hoard with HOARD_ADMIN_TOKEN set"})
		return
	}
	addr := c.ClientIP()
	if wait := a.limiter.blocked(addr); wait > 0 {
		c.Header("Retry-After", retryAfter(wait))
		_ = c.Error(&httpError{Status: http.StatusTooManyRequests, Code: "too_many_failures",
			Message: "too many failed sign-ins from this address; wait " + wait.Round(1e9).String()})
		return
	}
	// Another site's page must not sign a browser in (to an account of
	// its choosing): a form cannot send JSON, and the browser says where
	// a request comes from.
	if !strings.HasPrefix(c.GetHeader("Content-Type"), "application/json") || c.GetHeader("Sec-Fetch-Site") == "cross-site" {
		_ = c.Error(&httpError{Status: http.StatusForbidden, Code: "csrf",
			Message: "sign in from the web admin's own page (a JSON body, from this site)"})
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	if !bindJSON(c, 4<<10, &req) {
		return
	}
	p, err := a.check(c.Request.Context(), req.Token)
	if err != nil {
		if !errors.Is(err, accounts.ErrNotFound) {
			a.unavailable(c, err)
			return
		}
		a.limiter.fail(addr)
		a.logger.WarnContext(c.Request.Context(), "web admin sign-in with a wrong token", "addr", addr)
		_ = c.Error(&httpError{Status: http.StatusUnauthorized, Code: "unauthorized",
			Message: "that token is wrong, revoked or expired"})
		return
	}
	cookie, sess, err := a.accounts.CreateSession(c.Request.Context(), accounts.HashToken(req.Token), p.Account == BootstrapActor, a.idle)
	if err != nil {
		a.unavailable(c, err)
		return
	}
	a.setCookie(c, cookie, 0)
	a.logger.InfoContext(c.Request.Context(), "web admin sign-in", "account", p.Account, "addr", addr)
	c.JSON(http.StatusOK, SessionInfo{Account: p.Account, Roles: p.Roles.Strings(), CSRF: sess.CSRF})
}

func (a *auth) showSession(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	cookie, _ := c.Cookie(SessionCookie)
	p, sess, err := a.session(c, cookie)
	if err != nil {
		if !errors.Is(err, accounts.ErrNotFound) {
			a.unavailable(c, err)
			return
		}
		_ = c.Error(&httpError{Status: http.StatusUnauthorized, Code: "signed_out", Message: "not signed in"})
		return
	}
	c.JSON(http.StatusOK, SessionInfo{Account: p.Account, Roles: p.Roles.Strings(), CSRF: sess.CSRF})
}

func (a *auth) signOut(c *gin.Context) {
	cookie, _ := c.Cookie(SessionCookie)
	if _, sess, err := a.session(c, cookie); err == nil {
		if !a.csrfOK(c, sess) {
			return
		}
		if err := a.accounts.EndSession(c.Request.Context(), cookie); err != nil {
			a.unavailable(c, err)
			return
		}
	}
	a.setCookie(c, "", -1)
	c.JSON(http.StatusOK, gin.H{"signed_out": true})
}
