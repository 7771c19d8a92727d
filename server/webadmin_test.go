package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// session signs in to the web admin with tok and returns the session
// cookie and the CSRF value.
func (f *fixture) session(tok string) (*http.Cookie, string) {
	f.t.Helper()
	r := f.webAdmin(http.MethodPost, "/admin/session", `{"token":"`+tok+`"}`, nil, "", "Content-Type", "application/json")
	require.Equal(f.t, http.StatusOK, r.status, r.body)
	var info server.SessionInfo
	require.NoError(f.t, json.Unmarshal([]byte(r.body), &info))
	cookies := (&http.Response{Header: r.header}).Cookies()
	require.Len(f.t, cookies, 1)
	return cookies[0], info.CSRF
}

func (f *fixture) webAdmin(method, path, body string, cookie *http.Cookie, csrf string, headers ...string) reply {
	f.t.Helper()
	req, err := http.NewRequest(method, f.url+path, strings.NewReader(body))
	require.NoError(f.t, err)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if csrf != "" {
		req.Header.Set(server.CSRFHeader, csrf)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return f.do(req)
}

// TestWebAdminSession: signing in with a token gives an HttpOnly,
// SameSite=Strict session cookie and a CSRF value; a change made with the
// cookie needs the CSRF value (a cross-site POST carrying a valid cookie
// is refused and changes nothing); revoking the token ends the session;
// each use pushes the idle expiry back; signing out ends it.
func TestWebAdminSession(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token, AdminIdleTimeout: time.Hour})
		f.project("shop", queues.SettingsPatch{})
		alice := f.accountToken("alice", "project-admin:shop")

		page := f.webAdmin(http.MethodGet, "/admin/", "", nil, "")
		require.Equal(t, http.StatusOK, page.status)
		require.Contains(t, page.header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Equal(t, "DENY", page.header.Get("X-Frame-Options"))

		r := f.webAdmin(http.MethodPost, "/admin/session", `{"token":"hoard_wrong"}`, nil, "", "Content-Type", "application/json")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)
		// Another site cannot sign a browser in: a form posts no JSON, and
		// a cross-site request is refused, even with a right token.
		r = f.webAdmin(http.MethodPost, "/admin/session", `{"token":"`+alice+`"}`, nil, "", "Content-Type", "text/plain")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r = f.webAdmin(http.MethodPost, "/admin/session", `{"token":"`+alice+`"}`, nil, "", "Content-Type", "application/json", "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Empty(t, r.header.Values("Set-Cookie"))
		require.Empty(t, r.header.Values("Set-Cookie"))
		require.NotContains(t, r.body, "hoard_wrong", "an error never repeats a token")

		cookie, csrf := f.session(alice)
		require.True(t, cookie.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
		require.False(t, cookie.Secure, "plain HTTP here; Secure behind TLS")
		require.NotContains(t, cookie.Value, alice)
		require.NotEmpty(t, csrf)

		r = f.webAdmin(http.MethodGet, "/api/v1/whoami", "", cookie, "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"account":"alice"`)

		// A change without the CSRF value, or from another site, is refused.
		for _, c := range []struct {
			csrf    string
			headers []string
		}{{"", nil}, {"wrong", nil}, {csrf, []string{"Sec-Fetch-Site", "cross-site"}}} {
			r = f.webAdmin(http.MethodPatch, "/api/v1/projects/shop", `{"title":"Pwned"}`, cookie, c.csrf, c.headers...)
			require.Equal(t, http.StatusForbidden, r.status, r.body)
			require.Contains(t, r.body, `"code":"csrf"`)
		}
		p, err := f.engine.Project(f.ctx, "shop")
		require.NoError(t, err)
		require.Empty(t, p.Title, "a refused change changes nothing")

		r = f.webAdmin(http.MethodPatch, "/api/v1/projects/shop", `{"title":"Shop"}`, cookie, csrf, "Sec-Fetch-Site", "same-origin")
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodGet, "/projects/shop/log", "", token)
		require.Contains(t, r.body, `"by":"alice"`, "the page's changes are logged under the account")

		// Each use pushes the idle expiry back.
		key := accounts.SessionKey(accounts.HashToken(cookie.Value))
		ttl, err := b.Client.PTTL(f.ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute)
		require.NoError(t, b.Client.PExpire(f.ctx, key, 5*time.Second).Err())
		require.Equal(t, http.StatusOK, f.webAdmin(http.MethodGet, "/admin/session", "", cookie, "").status)
		ttl, err = b.Client.PTTL(f.ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute)

		// Revoking the token ends the session at once.
		var list struct{ Tokens []accounts.Token }
		require.NoError(t, json.Unmarshal([]byte(f.admin(http.MethodGet, "/tokens?account=alice", "", token).body), &list))
		require.Equal(t, http.StatusOK, f.admin(http.MethodDelete, "/tokens/"+list.Tokens[0].ID, "", token).status)
		r = f.webAdmin(http.MethodGet, "/api/v1/whoami", "", cookie, "")
		require.Equal(t, http.StatusUnauthorized, r.status, r.body)

		// Sign out needs the CSRF value, and ends the session.
		admin, adminCSRF := f.session(token)
		require.Equal(t, http.StatusForbidden, f.webAdmin(http.MethodDelete, "/admin/session", "", admin, "").status)
		require.Equal(t, http.StatusOK, f.webAdmin(http.MethodGet, "/api/v1/whoami", "", admin, "").status)
		r = f.webAdmin(http.MethodDelete, "/admin/session", "", admin, adminCSRF)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, strings.Join(r.header.Values("Set-Cookie"), ";"), "Max-Age=0")
		require.Equal(t, http.StatusUnauthorized, f.webAdmin(http.MethodGet, "/api/v1/whoami", "", admin, "").status)
	})
}

// TestWebAdminCookieSecureBehindTLS: with an https public URL (hoard
// behind a TLS-terminating proxy) the session cookie is Secure.
func TestWebAdminCookieSecureBehindTLS(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token, PublicURL: "https://tracker.example.org"})
		cookie, _ := f.session(token)
		require.True(t, cookie.Secure)
	})
}
