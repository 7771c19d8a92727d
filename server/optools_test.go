package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func requireCode(t *testing.T, r reply, status int, code, says string) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	body := decode(t, r.body)
	require.Equal(t, code, body["code"], r.body)
	require.Contains(t, body["error"], says)
}

// TestAdminDeleteProject: DELETE /projects/:slug needs confirm=<slug>,
// refuses with items out unless force (saying how many), answers 404 for
// an unknown project, and removes the keys and this frontend's files,
// recording the deletion in the global admin log.
func TestAdminDeleteProject(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		dir := t.TempDir()
		offloader := &queues.Offloader{Dir: dir, Node: "n1", Logger: quiet}
		f := newFixture(t, b, server.Config{AdminToken: token, Offloader: offloader})
		offloader.Engine = f.engine
		f.project("doomed", queues.SettingsPatch{}, "a", "b", "c")
		f.project("spared", queues.SettingsPatch{}, "s")
		segments := filepath.Join(dir, "segments", "doomed")
		require.NoError(t, os.MkdirAll(segments, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(segments, "000000000001.gz"), []byte("x"), 0o600))
		r := f.post("/doomed/multi=2/request", `{"downloader":"alice"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)

		requireCode(t, f.admin(http.MethodDelete, "/projects/doomed", "", token), http.StatusBadRequest, "invalid", "confirm with ?confirm=doomed")
		requireCode(t, f.admin(http.MethodDelete, "/projects/doomed?confirm=spared", "", token), http.StatusBadRequest, "invalid", "confirm")
		requireCode(t, f.admin(http.MethodDelete, "/projects/nosuch?confirm=nosuch", "", token), http.StatusNotFound, "project_not_found", "no project")
		requireCode(t, f.admin(http.MethodDelete, "/projects/doomed?confirm=doomed&force=maybe", "", token), http.StatusBadRequest, "invalid", "force")
		requireCode(t, f.admin(http.MethodDelete, "/projects/doomed?confirm=doomed", "", token), http.StatusConflict, "claims_out", "has 2 item(s) out")
		require.Equal(t, http.StatusUnauthorized, f.admin(http.MethodDelete, "/projects/doomed?confirm=doomed&force=true", "", "").status)
		counts, err := f.engine.Counts(f.ctx, "doomed")
		require.NoError(t, err, "the refusals changed nothing")
		require.Equal(t, int64(1), counts.Todo)
		require.Equal(t, int64(2), counts.Out)
		require.FileExists(t, filepath.Join(segments, "000000000001.gz"))

		r = f.admin(http.MethodDelete, "/projects/doomed?confirm=doomed&force=true", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var deleted server.DeleteProjectReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &deleted))
		require.Equal(t, "doomed", deleted.Deleted)
		require.Equal(t, int64(2), deleted.ClaimsOut)
		require.Equal(t, 1, deleted.Files)
		require.Positive(t, deleted.Keys)
		require.NoDirExists(t, segments)
		requireCode(t, f.admin(http.MethodGet, "/projects/doomed", "", token), http.StatusNotFound, "project_not_found", "no project")
		requireCode(t, f.post("/doomed/done", `{"downloader":"alice","item":"a","bytes":{"data":1}}`), http.StatusNotFound, "project_not_found", "no project")
		r = f.admin(http.MethodGet, "/projects", "", token)
		require.Equal(t, []any{"spared"}, decode(t, r.body)["projects"])

		r = f.admin(http.MethodGet, "/log?scope=global", "", token)
		var log struct{ Changes []queues.ChangeEntry }
		require.NoError(t, json.Unmarshal([]byte(r.body), &log))
		require.NotEmpty(t, log.Changes)
		require.Equal(t, "project deleted", log.Changes[0].What)
		require.Equal(t, "doomed", log.Changes[0].Project)
		require.Contains(t, string(log.Changes[0].Details), `"claims_out":2`)
	})
}

// TestAdminClaimsListAndExport: GET …/claims pages through who holds
// what, filtered by downloader and age; …/claims/export streams the
// same as lines; bad input (an unknown project, a non-numeric age or
// limit, a bad cursor) is a clear 400 or 404.
func TestAdminClaimsListAndExport(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		items := make([]string, 30)
		for i := range items {
			items[i] = fmt.Sprintf("item-%02d", i)
		}
		f.project("held", queues.SettingsPatch{}, items...)
		start := f.clock.Now()
		require.Equal(t, http.StatusOK, f.post("/held/multi=20/request", `{"downloader":"alice"}`).status)
		f.clock.Advance(2 * time.Hour)
		require.Equal(t, http.StatusOK, f.post("/held/multi=10/request", `{"downloader":"bob_1"}`).status)

		list := func(query string) []queues.Claim {
			var all []queues.Claim
			cursor := ""
			for pages := 0; pages < 100; pages++ {
				r := f.admin(http.MethodGet, "/projects/held/claims?limit=7&cursor="+cursor+query, "", token)
				require.Equal(t, http.StatusOK, r.status, r.body)
				var page server.ClaimsPage
				require.NoError(t, json.Unmarshal([]byte(r.body), &page))
				all = append(all, page.Claims...)
				if page.Next == "" {
					return all
				}
				cursor = page.Next
			}
			t.Fatal("the listing does not end")
			return nil
		}
		all := list("")
		require.Len(t, all, 30)
		require.Equal(t, "alice", all[0].Downloader)
		require.Equal(t, start.UnixMilli(), all[0].ClaimedAt.UnixMilli())
		require.Equal(t, 1, all[0].TimesClaimed)
		require.Equal(t, start.Add(queues.DefaultReclaimTTL).UnixMilli(), all[0].Deadline.UnixMilli())
		require.Equal(t, "bob_1", all[29].Downloader)
		require.Len(t, list("&downloader=bob_1"), 10)
		old := list("&older_than=1h")
		require.Len(t, old, 20)
		for _, c := range old {
			require.Equal(t, "alice", c.Downloader)
		}

		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?older_than=abc", "", token), http.StatusBadRequest, "invalid", `older_than "abc" is not a duration`)
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?older_than=-1h", "", token), http.StatusBadRequest, "invalid", "not a duration")
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?limit=lots", "", token), http.StatusBadRequest, "invalid", `limit "lots" is not a number`)
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?limit=0", "", token), http.StatusBadRequest, "invalid", "limit must be between")
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?cursor=zzz", "", token), http.StatusBadRequest, "invalid", "bad cursor")
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims?downloader=no!", "", token), http.StatusBadRequest, "invalid", "")
		requireCode(t, f.admin(http.MethodGet, "/projects/nosuch/claims", "", token), http.StatusNotFound, "project_not_found", "no project")

		r := f.admin(http.MethodGet, "/projects/held/claims/export", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		lines := strings.Split(strings.TrimSuffix(r.body, "\n"), "\n")
		require.Len(t, lines, 30)
		require.Equal(t, all[0].Item+"\talice\t2026-11-22T12:00:00.000Z", lines[0])
		require.Equal(t, all[29].Item+"\tbob_1\t2026-11-22T14:00:00.000Z", lines[29])
		r = f.admin(http.MethodGet, "/projects/held/claims/export?downloader=bob_1", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, 10, strings.Count(r.body, "\n"))
		requireCode(t, f.admin(http.MethodGet, "/projects/held/claims/export?older_than=abc", "", token), http.StatusBadRequest, "invalid", "not a duration")
		requireCode(t, f.admin(http.MethodGet, "/projects/nosuch/claims/export", "", token), http.StatusNotFound, "project_not_found", "no project")
	})
}

// TestAdminLogShowsEveryChange: GET /log without a scope shows the global
// changes and every project's, each naming its project.
func TestAdminLogShowsEveryChange(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		require.Equal(t, http.StatusCreated, f.admin(http.MethodPost, "/projects/logged", `{"title":"Logged"}`, token).status)
		f.clock.Advance(time.Second)
		require.Equal(t, http.StatusOK, f.admin(http.MethodPut, "/blocks/mallory", `{"reason":"spam"}`, token).status)
		f.clock.Advance(time.Second)
		require.Equal(t, http.StatusOK, f.admin(http.MethodPatch, "/projects/logged", `{"title":"Renamed"}`, token).status)

		whats := func(path string) []string {
			r := f.admin(http.MethodGet, path, "", token)
			require.Equal(t, http.StatusOK, r.status, r.body)
			var log struct{ Changes []queues.ChangeEntry }
			require.NoError(t, json.Unmarshal([]byte(r.body), &log))
			var out []string
			for _, c := range log.Changes {
				out = append(out, c.Project+":"+c.What)
			}
			return out
		}
		require.Equal(t, []string{"logged:settings changed", ":blocked", "logged:project created"}, whats("/log"))
		require.Equal(t, []string{":blocked"}, whats("/log?scope=global"))
		require.Equal(t, []string{":settings changed", ":project created"}, whats("/projects/logged/log"))
		requireCode(t, f.admin(http.MethodGet, "/log?scope=bogus", "", token), http.StatusBadRequest, "invalid", "scope must be")
		requireCode(t, f.admin(http.MethodGet, "/projects/nosuch{/log", "", token), http.StatusBadRequest, "invalid", "")
	})
}

// TestBackfeedSecretNeverReachesTheLogs: a project created and changed
// with a backfeed secret, and backfeeds with the right and a wrong one,
// leave neither secret in hoard's log nor in the admin logs; the admin
// log names the secret by its fingerprint.
func TestBackfeedSecretNeverReachesTheLogs(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		var logs bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		f := newFixture(t, b, server.Config{AdminToken: token, Logger: logger})
		first, second := "FirstSecret_0123", "SecondSecret_4567"
		r := f.admin(http.MethodPost, "/projects/fed", `{"backfeed_secret":"`+first+`"}`, token)
		require.Equal(t, http.StatusCreated, r.status, r.body)
		r = f.admin(http.MethodPatch, "/projects/fed", `{"backfeed_secret":"`+second+`","title":"Fed"}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/backfeed/legacy/fed-"+second, "a\x00b")
		require.Equal(t, http.StatusOK, r.status, r.body)
		r = f.post("/backfeed/legacy/fed-"+first, "c")
		require.Equal(t, http.StatusForbidden, r.status, r.body)

		var adminLogs []string
		for _, path := range []string{"/log", "/log?scope=global", "/projects/fed/log"} {
			r := f.admin(http.MethodGet, path, "", token)
			require.Equal(t, http.StatusOK, r.status)
			adminLogs = append(adminLogs, r.body)
		}
		require.NotEmpty(t, logs.String())
		for _, secret := range []string{first, second} {
			require.NotContains(t, logs.String(), secret)
			for _, log := range adminLogs {
				require.NotContains(t, log, secret)
			}
		}
		require.Contains(t, adminLogs[2], `\"secret_fp\":\"`+queues.SecretFingerprint(second)+`\"`)
		require.Contains(t, adminLogs[2], `"secret_fp":"`+queues.SecretFingerprint(first)+`"`)
		require.Contains(t, logs.String(), queues.SecretFingerprint(first))
		require.Len(t, queues.SecretFingerprint(first), 8)
		require.NotEqual(t, queues.SecretFingerprint(first), queues.SecretFingerprint(second))
	})
}

// TestRepeatDoneForAnItemDoneLongAgo: in done mode count, an item pushed
// out of recent_done and reported done again gets the OK seesaw accepts
// and counts nothing, alone or beside an item really completed now; an
// item still queued is not completed by such a report; done mode keep
// still refuses an item never handed out.
func TestRepeatDoneForAnItemDoneLongAgo(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		items := []string{"old"}
		for i := range 1000 {
			items = append(items, fmt.Sprintf("next-%04d", i))
		}
		items = append(items, "fresh", "queued")
		f.project("counted", queues.SettingsPatch{DoneMode: ptr(queues.DoneCount), RecentDone: ptr(1000), MaxMulti: ptr(1000)}, items...)
		done := func(item string) reply {
			return f.post("/counted/done", `{"downloader":"alice","item":"`+item+`","bytes":{"data":10}}`)
		}
		r := f.post("/counted/request", `{"downloader":"alice"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, http.StatusOK, done("old").status)
		f.clock.Advance(time.Second)
		r = f.post("/counted/multi=1000/request", `{"downloader":"alice"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		next := strings.Join(items[1:1001], `\u0000`)
		require.Equal(t, http.StatusOK, done(next).status)
		recent, err := b.Client.ZScore(f.ctx, queues.RecentDoneKey("counted"), "old").Result()
		require.Error(t, err, "old must have left recent_done (score %v)", recent)

		stats := func() (int64, int64, queues.Counts) {
			s, err := f.engine.Stats(f.ctx, "counted")
			require.NoError(t, err)
			return s.Counters["items_done"], s.Counters["bytes_done"], s.Counts
		}
		doneBefore, bytesBefore, countsBefore := stats()
		require.Equal(t, int64(1001), doneBefore)

		r = done("old")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "OK\n", r.body)
		doneAfter, bytesAfter, countsAfter := stats()
		require.Equal(t, doneBefore, doneAfter, "a repeat counts nothing")
		require.Equal(t, bytesBefore, bytesAfter)
		require.Equal(t, countsBefore, countsAfter)

		// Beside an item completed now: that one is completed, once.
		r = f.post("/counted/request", `{"downloader":"alice"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "fresh")
		r = done(`old\u0000fresh`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		doneAfter, _, countsAfter = stats()
		require.Equal(t, doneBefore+1, doneAfter)
		require.Zero(t, countsAfter.Out)

		// An item still queued is not completed by a report of it.
		require.Equal(t, http.StatusOK, done("queued").status)
		_, _, countsAfter = stats()
		require.Equal(t, int64(1), countsAfter.Todo, "the queued item stays queued")
		r = f.post("/counted/request", `{"downloader":"bob_1"}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Contains(t, r.body, "queued")

		// Done mode keep knows every completion: never handed out is 409.
		f.project("kept", queues.SettingsPatch{}, "k")
		requireCode(t, f.post("/kept/done", `{"downloader":"alice","item":"k","bytes":{"data":1}}`), http.StatusConflict, "not_handed_out", "never handed out")
	})
}

func ptr[T any](v T) *T { return &v }

// TestImportWithABadPartChangesNothing: every part of an import is checked
// before any is written, so a bad claim does not leave the done items of
// the same request imported.
func TestImportWithABadPartChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		_, err := f.engine.CreateProject(f.ctx, "imp", queues.SettingsPatch{})
		require.NoError(t, err)
		for _, body := range []string{
			`{"done":["a","b"],"claims":[{"item":"c","downloader":"x","claimed_at":"2020-01-01T00:00:00Z"}]}`,
			`{"done":["a"],"claims":[{"item":"c","downloader":"bobby"}]}`,
			`{"done":["a"],"downloaders":{"bobby":{"bytes":-5}}}`,
			`{"done":["a"],"domain_bytes":{"":1}}`,
			`{"done":"a"}`,
		} {
			r := f.admin(http.MethodPost, "/projects/imp/import", body, token)
			require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
		}
		c, err := f.engine.Counts(f.ctx, "imp")
		require.NoError(t, err)
		require.Zero(t, c.Done, "nothing was imported")
		r := f.admin(http.MethodPost, "/projects/nosuch/import", `{"done":["a"]}`, token)
		require.Equal(t, http.StatusNotFound, r.status, r.body)
		r = f.admin(http.MethodPost, "/projects/imp/import", `{"done":["a","b"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.JSONEq(t, `{"done":{"imported":2,"skipped":0},"claims":{"imported":0,"skipped":0},"downloaders":0}`, r.body)
	})
}
