package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func TestAdminLimitsMovesBlocksAndLog(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		f.project("lim", queues.SettingsPatch{}, "user:a", "user:b", "post:1", "post:2")

		adminAs := func(method, path, body string) reply {
			req, err := http.NewRequest(method, f.url+"/api/v1"+path, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(server.ActorHeader, "ops@example")
			return f.do(req)
		}
		r := adminAs(http.MethodPut, "/projects/lim/limit-groups", `{"groups":[{"name":"users","type":"user","rate_per_minute":0}]}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"moved":2`)
		r = adminAs(http.MethodPut, "/projects/lim/limit-groups", `{"groups":[{"name":"bad","regex":"("}]}`)
		require.Equal(t, http.StatusBadRequest, r.status, r.body)

		r = f.post("/lim/multi=10//request", `{"downloader":"tester1","api_version":"2"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "post:1\x00post:2", decode(t, r.body)["item_name"], "held-back users are not served")
		r = f.post("/lim/request", `{"downloader":"tester1","api_version":"2"}`)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		require.Contains(t, r.body, "rate-limited")

		r = adminAs(http.MethodPost, "/projects/lim/queues/move", `{"from":"todo","to":"secondary","glob":"user:*","dry_run":true}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"moved":2,"scanned":2,"dry_run":true}`, r.body, "a preview counts and moves nothing")
		r = adminAs(http.MethodPost, "/projects/lim/queues/move", `{"from":"todo","to":"secondary","glob":"user:a"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"moved":1`)
		require.Equal(t, http.StatusBadRequest, adminAs(http.MethodPost, "/projects/lim/queues/move", `{"from":"todo","to":"mars"}`).status)

		r = adminAs(http.MethodPut, "/blocks/tester2", `{"reason":"global ban"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/lim/request", `{"downloader":"tester2","api_version":"2"}`)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Contains(t, r.body, "global ban")
		require.Contains(t, adminAs(http.MethodGet, "/blocks", ``).body, "global ban")
		require.Equal(t, http.StatusOK, adminAs(http.MethodDelete, "/blocks/tester2", ``).status)

		r = adminAs(http.MethodGet, "/projects/lim/log", ``)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, `"what":"limit groups set"`)
		require.Contains(t, r.body, `"what":"items moved"`)
		// The log names the account the token belongs to (here the
		// bootstrap admin), never the actor a client declares.
		require.Contains(t, r.body, `"by":"HOARD_ADMIN_TOKEN"`)
		require.NotContains(t, r.body, "ops@example")
		r = adminAs(http.MethodGet, "/log", ``)
		require.Contains(t, r.body, `"what":"blocked"`)
		require.Contains(t, r.body, `"what":"unblocked"`)
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodGet, "/log", ``, "").status)

		counts, err := f.engine.Counts(f.ctx, "lim")
		require.NoError(t, err)
		require.Equal(t, queues.Counts{Todo: 1, Secondary: 1, Out: 2}, counts)
	})
}
