package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/http1"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// ginClientIP is gin's answer for one request under trusted.
func ginClientIP(t *testing.T, trusted []string, remoteAddr string, header http.Header) string {
	// The engine's settings, as server.New's router has them.
	engine := gin.New()
	require.NoError(t, engine.SetTrustedProxies(trusted))
	c := gin.CreateTestContextOnly(httptest.NewRecorder(), engine)
	c.Request = httptest.NewRequest(http.MethodPost, "/p/request", nil)
	c.Request.RemoteAddr = remoteAddr
	c.Request.Header = header
	return c.ClientIP()
}

// warriorClientIP is the warrior listener's answer for the same request
// (one line per header, as the listener hands on anything else).
func warriorClientIP(t *testing.T, trusted []string, remoteAddr string, header http.Header) string {
	nets, err := parseTrustedProxies(trusted)
	require.NoError(t, err)
	l := &warriorListener{trusted: nets}
	c := &warriorConn{}
	c.S.remoteRead = true
	_, c.S.remoteTrusted, c.S.remoteIP = nets.remote(remoteAddr)
	c.Head.Fields[fieldForwardedFor] = fieldOf(header.Values("X-Forwarded-For"))
	c.Head.Fields[fieldRealIP] = fieldOf(header.Values("X-Real-IP"))
	return l.clientIP(c)
}

func fieldOf(values []string) (f http1.Field) {
	if len(values) > 0 {
		f.First, f.Last, f.Lines = values[0], values[len(values)-1], len(values)
	}
	return f
}

var clientIPTrusted = [][]string{nil, {"127.0.0.1"}, {"10.0.0.0/8", "::1"}, {"192.0.2.0/24", "2001:db8::/32"}}

// TestClientIPIsGins: the warrior listener reads a claim's client address
// as gin's ClientIP does under the server's settings, trusted proxies or
// none, for the headers a proxy or a client may send.
func TestClientIPIsGins(t *testing.T) {
	remotes := []string{"127.0.0.1:40000", "10.1.2.3:1", "[::1]:5", "192.0.2.9:80", "[2001:db8::7]:9", "203.0.113.5:7", "[fe80::1%eth0]:3", "bogus"}
	headers := []string{"", "198.51.100.1", "198.51.100.1, 10.0.0.2", " 203.0.113.9 ,127.0.0.1", "junk, 10.0.0.1", "10.0.0.1, 10.0.0.2", "2001:db8::1", ","}
	for _, trusted := range clientIPTrusted {
		for _, remote := range remotes {
			for _, xff := range headers {
				for _, real := range []string{"", "198.51.100.77", "nonsense"} {
					h := http.Header{}
					if xff != "" {
						h.Set("X-Forwarded-For", xff)
					}
					if real != "" {
						h.Set("X-Real-IP", real)
					}
					require.Equal(t, ginClientIP(t, trusted, remote, h), warriorClientIP(t, trusted, remote, h),
						"trusted %v remote %q X-Forwarded-For %q X-Real-IP %q", trusted, remote, xff, real)
				}
			}
		}
	}
}

// FuzzClientIPIsGins: the same for any remote address and header values.
func FuzzClientIPIsGins(f *testing.F) {
	f.Add(uint8(1), "127.0.0.1:1", "198.51.100.1, 127.0.0.1", "")
	f.Add(uint8(2), "[::1]:1", "", "2001:db8::1")
	f.Fuzz(func(t *testing.T, which uint8, remote, xff, real string) {
		trusted := clientIPTrusted[int(which)%len(clientIPTrusted)]
		if strings.ContainsAny(xff+real, "\r\n") {
			return // not a header value
		}
		h := http.Header{}
		if xff != "" {
			h["X-Forwarded-For"] = []string{xff}
		}
		if real != "" {
			h["X-Real-Ip"] = []string{real}
		}
		require.Equal(t, ginClientIP(t, trusted, remote, h), warriorClientIP(t, trusted, remote, h))
	})
}

// TestWarriorCallPathsAreNotGinRoutes: no route the router has of its own
// takes a POST the warrior listener answers, so the listener never
// answers what gin would have routed elsewhere.
func TestWarriorCallPathsAreNotGinRoutes(t *testing.T) {
	engine := queues.NewEngine(redistest.Require(t)[0].Client, queues.Options{Logger: quietLog})
	srv, err := New(Config{Logger: quietLog, ProjectsFile: t.TempDir() + "/projects.json", PluginAccess: workAccess{}}, engine)
	require.NoError(t, err)
	router := srv.handler.(*gin.Engine)
	checked := 0
	for _, r := range router.Routes() {
		for _, fill := range []string{"request", "done", "fail", "multi=2"} {
			path := r.Path
			for _, part := range strings.Split(path, "/") {
				if strings.HasPrefix(part, ":") || strings.HasPrefix(part, "*") {
					path = strings.Replace(path, part, fill, 1)
				}
			}
			for _, p := range []string{path, path + "/request", path + "/done"} {
				if _, ok := warriorCallRoute(p); ok && r.Method == http.MethodPost {
					t.Errorf("the warrior listener would answer POST %s, gin's route %s %s", p, r.Method, r.Path)
				}
				checked++
			}
		}
	}
	require.Greater(t, checked, 100)
	_, ok := warriorCallRoute("/p/multi=2//request")
	require.True(t, ok)
}
