package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

const secret = "s3cret_backfeed"

func backfeedFixture(t *testing.T, b redistest.Backend) *fixture {
	t.Helper()
	f := newFixture(t, b, server.Config{})
	s := secret
	f.project("grab-it", queues.SettingsPatch{BackfeedSecret: &s})
	return f
}

func (f *fixture) backfeed(path, contentType, body string) (reply, map[string]any) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
	require.NoError(f.t, err)
	req.Header.Set("Content-Type", contentType)
	r := f.do(req)
	var m map[string]any
	_ = json.Unmarshal([]byte(r.body), &m)
	return r, m
}

func TestBackfeedEndpoint(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := backfeedFixture(t, b)
		url := "/backfeed/legacy/grab-it-" + secret
		// LuaSocket labels the body a form; it must never be parsed as one.
		r, m := f.backfeed(url+"?shard=s1", "application/x-www-form-urlencoded", "url:a=1&b=2\x00url:b\x00url:a=1&b=2\x00\x00"+strings.Repeat("x", queues.MaxItemBytes+1)+"\x00")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, map[string]any{"status_code": 200.0, "received": 5.0, "new": 2.0, "duplicate": 1.0, "rejected": 2.0, "shard": "s1"}, m)
		r, m = f.backfeed(url, "text/plain", "url:b\nurl:c\r\n")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1.0, m["new"])
		require.Equal(t, 1.0, m["duplicate"])

		counts, err := f.engine.Counts(f.ctx, "grab-it")
		require.NoError(t, err)
		require.EqualValues(t, 3, counts.Backfeed)

		r, _ = f.backfeed("/backfeed/legacy/grab-it-wrongsecret", "text/plain", "url:z\x00")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r, _ = f.backfeed("/backfeed/legacy/nosuch-"+secret, "text/plain", "url:z\x00")
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		r, _ = f.backfeed("/backfeed/legacy/grab-it", "text/plain", "url:z\x00")
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		r, _ = f.backfeed(url, "text/plain", strings.Repeat("y", server.DefaultBackfeedBodyBytes+1))
		require.Equal(t, http.StatusRequestEntityTooLarge, r.status)
		// The secret is checked before the body is read: an oversized body
		// with a wrong secret is refused as forbidden, not read.
		r, _ = f.backfeed("/backfeed/legacy/grab-it-wrongsecret", "text/plain", strings.Repeat("y", server.DefaultBackfeedBodyBytes+1))
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r, _ = f.backfeed(url, "text/plain", strings.Repeat("i\n", server.DefaultBackfeedItems+1))
		require.Equal(t, http.StatusRequestEntityTooLarge, r.status, r.body)
		require.Contains(t, r.body, "send smaller batches")
		f.project("closed", queues.SettingsPatch{})
		r, _ = f.backfeed("/backfeed/legacy/closed-"+secret, "text/plain", "url:z\x00")
		require.Equal(t, http.StatusForbidden, r.status, "backfeed is off without a secret")
		counts, err = f.engine.Counts(f.ctx, "grab-it")
		require.NoError(t, err)
		require.EqualValues(t, 3, counts.Backfeed, "refused batches queued nothing")

		// Items registered by queue add are never backfed again.
		r = f.admin(http.MethodPost, "/projects/grab-it/items", `{"queue":"todo","register":true,"items":["url:d","url:b"]}`, "")
		require.Equal(t, http.StatusForbidden, r.status) // the fixture has no admin token
		res, err := f.engine.EnqueueRegistered(f.ctx, "grab-it", queues.QueueTodo, []string{"url:d", "url:b"})
		require.NoError(t, err)
		require.Equal(t, queues.BackfeedResult{Received: 2, New: 1, Duplicate: 1, Waiting: 1}, res, "url:b waits in backfeed")
		_, m = f.backfeed(url, "text/plain", "url:d\x00")
		require.Equal(t, 1.0, m["duplicate"])
	})
}

// TestBackfeedWithLuaSocket posts batches the way grab scripts do, with
// Debian's lua5.1 and lua-socket.
func TestBackfeedWithLuaSocket(t *testing.T) {
	if _, err := exec.LookPath("lua5.1"); err != nil || exec.Command("lua5.1", "-e", `require("socket.http")`).Run() != nil {
		reason := "lua5.1 with lua-socket is not installed (apt-get install lua5.1 lua-socket)"
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := backfeedFixture(t, b)
		url := f.url + "/backfeed/legacy/grab-it-" + secret
		run := func(prefix string, count int) (codes []string, results []map[string]any) {
			out, err := exec.Command("lua5.1", "testdata/backfeed.lua", url, prefix, strconv.Itoa(count), "400").CombinedOutput()
			require.NoError(t, err, string(out))
			scanner := bufio.NewScanner(bytes.NewReader(out))
			for scanner.Scan() {
				code, body, _ := strings.Cut(scanner.Text(), " ")
				codes = append(codes, code)
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(body), &m), body)
				results = append(results, m)
			}
			return codes, results
		}
		codes, results := run("user:", 1000)
		require.Equal(t, []string{"200", "200", "200"}, codes)
		var fresh float64
		for _, m := range results {
			require.Equal(t, 200.0, m["status_code"], "grab scripts also check status_code in the body")
			fresh += m["new"].(float64)
		}
		require.Equal(t, 1000.0, fresh)
		_, results = run("user:", 400) // the same items again
		require.Equal(t, 400.0, results[0]["duplicate"])
		require.Equal(t, 0.0, results[0]["new"])
		counts, err := f.engine.Counts(f.ctx, "grab-it")
		require.NoError(t, err)
		require.EqualValues(t, 1000, counts.Backfeed)
	})
}

// TestRegisteredItemsAreDuplicatesToBackfeed: `queue add --register` goes
// through the admin API with a token; backfeed then calls the items
// duplicates and queues nothing.
func TestRegisteredItemsAreDuplicatesToBackfeed(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		s := secret
		f.project("grab-it", queues.SettingsPatch{BackfeedSecret: &s})
		r := f.admin(http.MethodPost, "/projects/grab-it/items", `{"queue":"todo","register":true,"items":["url:r1","url:r2"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 2.0, decode(t, r.body)["queued"])
		r = f.admin(http.MethodPost, "/projects/grab-it/items", `{"queue":"todo","register":true,"items":["url:r2","url:r3"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 1.0, decode(t, r.body)["queued"])
		require.Equal(t, 1.0, decode(t, r.body)["already_queued"], "url:r2 is waiting")
		require.Equal(t, 0.0, decode(t, r.body)["skipped"], "nothing was out or done")

		_, m := f.backfeed("/backfeed/legacy/grab-it-"+secret, "text/plain", "url:r1\x00url:r3\x00url:new\x00")
		require.Equal(t, 2.0, m["duplicate"])
		require.Equal(t, 1.0, m["new"])
		counts, err := f.engine.Counts(f.ctx, "grab-it")
		require.NoError(t, err)
		require.EqualValues(t, 3, counts.Todo)
		require.EqualValues(t, 1, counts.Backfeed)
	})
}
