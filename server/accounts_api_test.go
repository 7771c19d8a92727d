package server_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestAccountsAndTokensAPI: the bootstrap admin adds accounts; an account
// makes, lists and revokes its own tokens and no one else's; bad input
// is refused and changes nothing; every change is in the admin log under
// the account that made it; no token appears in a log line, the admin
// log or an error.
func TestAccountsAndTokensAPI(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		logs := &lockedBuffer{}
		f := newFixture(t, b, server.Config{AdminToken: token, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		f.project("shop", queues.SettingsPatch{})
		f.project("news", queues.SettingsPatch{})

		r := f.admin(http.MethodPost, "/accounts", `{"name":"alice","roles":["project-admin:shop","viewer:news"]}`, token)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		for _, bad := range []string{`{"name":"Bob","roles":[]}`, `{"name":"bob","roles":["root"]}`,
			`{"name":"bob","roles":["project-admin:{x}"]}`, `not json`} {
			r = f.admin(http.MethodPost, "/accounts", bad, token)
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", bad, r.body)
		}
		r = f.admin(http.MethodPost, "/accounts", `{"name":"alice","roles":[]}`, token)
		require.Equal(t, http.StatusConflict, r.status, r.body)
		r = f.admin(http.MethodGet, "/accounts", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NotContains(t, r.body, `"bob"`, "a refused account is not added")

		// The bootstrap admin makes alice's first token, shown once.
		r = f.admin(http.MethodPost, "/tokens", `{"name":"laptop"}`, token)
		require.Equal(t, http.StatusBadRequest, r.status, "HOARD_ADMIN_TOKEN is no account: %s", r.body)
		r = f.admin(http.MethodPost, "/tokens", `{"name":"laptop","account":"alice","expires_in":"720h"}`, token)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		var made server.NewToken
		require.NoError(t, json.Unmarshal([]byte(r.body), &made))
		alice := made.Secret
		require.True(t, strings.HasPrefix(alice, "hoard_"))
		require.NotNil(t, made.ExpiresAt)

		r = f.admin(http.MethodGet, "/whoami", "", alice)
		require.JSONEq(t, `{"account":"alice","roles":["project-admin:shop","viewer:news"],"token_id":"`+made.ID+`"}`, r.body)

		// alice runs her project, reads the other, and is told plainly
		// what she may not do.
		r = f.admin(http.MethodPatch, "/projects/shop", `{"title":"Shop"}`, alice)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodPatch, "/projects/news", `{"title":"Mine now"}`, alice)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Contains(t, r.body, "account alice (project-admin:shop, viewer:news) may not PATCH /api/v1/projects/:slug: that needs admin or project-admin:news")
		p, err := f.engine.Project(f.ctx, "news")
		require.NoError(t, err)
		require.Empty(t, p.Title, "a refused call changes nothing")
		r = f.admin(http.MethodGet, "/projects", "", alice)
		require.JSONEq(t, `{"projects":["news","shop"]}`, r.body)
		r = f.admin(http.MethodGet, "/accounts", "", alice)
		require.Equal(t, http.StatusForbidden, r.status, r.body)

		// A viewer reads settings but not the backfeed secret.
		secret := "backfeed_secret_value_1234567890"
		_, err = f.engine.UpdateProject(f.ctx, "news", queues.SettingsPatch{BackfeedSecret: &secret})
		require.NoError(t, err)
		r = f.admin(http.MethodGet, "/projects/news", "", alice)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NotContains(t, r.body, secret)
		require.Contains(t, r.body, "secret_fp")

		// alice's own tokens: make, list, revoke; not another's.
		r = f.admin(http.MethodPost, "/tokens", `{"name":"ci"}`, alice)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		var ci server.NewToken
		require.NoError(t, json.Unmarshal([]byte(r.body), &ci))
		r = f.admin(http.MethodPost, "/tokens", `{"name":"sneaky","account":"carol"}`, alice)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		bobToken := f.accountToken("bob", "viewer:shop")
		r = f.admin(http.MethodGet, "/tokens?account=bob", "", alice)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r = f.admin(http.MethodGet, "/tokens", "", alice)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"name":"ci"`)
		require.Contains(t, r.body, `"name":"laptop"`)
		require.NotContains(t, r.body, `"account":"bob"`)
		require.Contains(t, r.body, `"last_used"`)
		var bobs struct{ Tokens []struct{ ID string } }
		require.NoError(t, json.Unmarshal([]byte(f.admin(http.MethodGet, "/tokens", "", bobToken).body), &bobs))
		require.Len(t, bobs.Tokens, 1)
		r = f.admin(http.MethodDelete, "/tokens/"+bobs.Tokens[0].ID, "", alice)
		require.Equal(t, http.StatusNotFound, r.status, "another's token is no business of alice's: %s", r.body)
		require.Equal(t, http.StatusOK, f.admin(http.MethodGet, "/whoami", "", bobToken).status)
		r = f.admin(http.MethodDelete, "/tokens/"+ci.ID, "", alice)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/whoami", "", ci.Secret).status)

		// An admin sets roles and removes accounts; their tokens go too.
		r = f.admin(http.MethodPatch, "/accounts/alice", `{"roles":["viewer:*"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.admin(http.MethodPatch, "/projects/shop", `{"title":"Again"}`, alice)
		require.Equal(t, http.StatusForbidden, r.status, "a new role applies at once: %s", r.body)
		r = f.admin(http.MethodDelete, "/accounts/bob", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/whoami", "", bobToken).status)

		// Expiry: a token made to last an hour stops after it.
		r = f.admin(http.MethodPost, "/tokens", `{"name":"short","expires_in":"1h"}`, alice)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		var short server.NewToken
		require.NoError(t, json.Unmarshal([]byte(r.body), &short))
		require.Equal(t, http.StatusOK, f.admin(http.MethodGet, "/whoami", "", short.Secret).status)
		f.clock.Advance(time.Hour)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/whoami", "", short.Secret).status)

		// The admin log names the account of each change.
		r = f.admin(http.MethodGet, "/log", "", token)
		var log struct{ Changes []queues.ChangeEntry }
		require.NoError(t, json.Unmarshal([]byte(r.body), &log))
		by := map[string]string{}
		for _, e := range log.Changes {
			by[e.What] = e.By
		}
		require.Equal(t, "HOARD_ADMIN_TOKEN", by["account added"])
		require.Equal(t, "alice", by["settings changed"])
		require.Equal(t, "alice", by["token revoked"])

		// No token in hoard's log, the admin log or an answer but its own.
		for _, secret := range []string{alice, ci.Secret, bobToken, short.Secret, token} {
			require.NotContains(t, logs.String(), secret)
			require.NotContains(t, r.body, secret)
		}
	})
}

// TestWrongTokensAreRateLimitedPerAddress: after FailureBurst wrong
// tokens an address is refused without its token being looked at, even
// a right one, until a try has refilled; right tokens cost nothing.
func TestWrongTokensAreRateLimitedPerAddress(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		for range 50 {
			require.Equal(t, http.StatusOK, f.admin(http.MethodGet, "/whoami", "", token).status)
		}
		for i := range server.FailureBurst {
			r := f.admin(http.MethodGet, "/whoami", "", "hoard_wrong")
			require.Equal(t, http.StatusUnauthorized, r.status, "try %d: %s", i, r.body)
		}
		r := f.admin(http.MethodGet, "/whoami", "", "hoard_wrong")
		require.Equal(t, http.StatusTooManyRequests, r.status, r.body)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		r = f.admin(http.MethodGet, "/whoami", "", token)
		require.Equal(t, http.StatusTooManyRequests, r.status, "a blocked address is not even checked: %s", r.body)
		f.clock.Advance(server.FailureRefill)
		require.Equal(t, http.StatusOK, f.admin(http.MethodGet, "/whoami", "", token).status)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/whoami", "", "hoard_wrong").status)
		require.Equal(t, http.StatusTooManyRequests, f.admin(http.MethodGet, "/whoami", "", "hoard_wrong").status)
	})
}

// lockedBuffer collects the server's log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
