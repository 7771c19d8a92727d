package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each connection's stack is grown on its first request only: later
// requests on a kept-alive connection find its note set, and a new
// connection gets a note of its own.
func TestAConnectionsStackIsGrownOnItsFirstRequestOnly(t *testing.T) {
	var seen []*connStack
	var grownBefore []bool
	h := withGrownStack(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note, ok := r.Context().Value(connStackKey{}).(*connStack)
		require.True(t, ok, "the connection has no note")
		seen = append(seen, note)
		grownBefore = append(grownBefore, note.grown)
		_, _ = io.WriteString(w, "ok")
	}))
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = noteConnStack
	srv.Start()
	t.Cleanup(srv.Close)

	get := func(client *http.Client) {
		t.Helper()
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, "ok", string(body), "the request was not served")
	}
	keepAlive := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	get(keepAlive)
	get(keepAlive)
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get(fresh)

	require.Len(t, seen, 3)
	require.Same(t, seen[0], seen[1], "two requests on one connection have one note")
	require.NotSame(t, seen[0], seen[2], "a new connection has a note of its own")
	require.Equal(t, []bool{true, true, true}, grownBefore, "a request ran before its connection's stack was grown")
}

// A request that came without the server's ConnContext (a test calling the
// handler directly) is served all the same, without the growth.
func TestWithGrownStackServesARequestWithoutANote(t *testing.T) {
	served := false
	h := withGrownStack(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	require.True(t, served)
}
