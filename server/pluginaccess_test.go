package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// closedProjects is a plugin host whose plugin "bittorrent" owns the
// project bt-scoring, whose type is not public; the worker token opens it.
type closedProjects struct{}

const workerToken = "site-worker-token-0001"

func (closedProjects) WarriorAccess(project, bearer string) (string, bool, bool) {
	if project != "bt-scoring" {
		return "", false, true
	}
	return "bittorrent", true, bearer == workerToken
}

func (closedProjects) PrivateProject(project string) bool { return project == "bt-scoring" }

// TestAPluginsWorkIsNotPublic: an anonymous warrior can neither claim nor
// report a plugin's items (the "bt-scoring" round that went
// missing), nothing changes when it tries, and the project is on neither
// the index page nor projects.json; the site's worker with its token
// works the items as before; a public project is untouched.
func TestAPluginsWorkIsNotPublic(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		path := filepath.Join(t.TempDir(), "projects.json")
		require.NoError(t, os.WriteFile(path, []byte(`{"projects": [{"name": "bt-scoring"}, {"name": "live"}]}`), 0o644))
		f := newFixture(t, b, server.Config{ProjectsFile: path, PluginAccess: closedProjects{}})
		f.project("bt-scoring", queues.SettingsPatch{}, "score:aa:1")
		f.project("live", queues.SettingsPatch{}, "item-a")

		body := `{"downloader": "anyone", "api_version": "2", "version": "20240101.01"}`
		r := f.post("/bt-scoring/request", body)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		require.Equal(t, "plugin_work", decode(t, r.body)["code"])
		require.Contains(t, decode(t, r.body)["error"], "worker token")
		r = f.post("/bt-scoring/done", `{"downloader": "anyone", "version": "20240101.01", "item": "score:aa:1", "bytes": {}}`)
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		r = f.post("/bt-scoring/request", body, "Authorization", "Bearer wrong-token-000000000")
		require.Equal(t, http.StatusForbidden, r.status, r.body)
		counts, err := f.engine.Counts(f.ctx, "bt-scoring")
		require.NoError(t, err)
		require.EqualValues(t, 1, counts.Todo, "a refused call changed nothing")
		require.Zero(t, counts.Out)

		r = f.post("/bt-scoring/request", `{"downloader": "site-worker", "api_version": "2", "version": "20240101.01"}`,
			"Authorization", "Bearer "+workerToken)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "score:aa:1", decode(t, r.body)["item_name"])

		r = f.post("/live/request", body)
		require.Equal(t, http.StatusOK, r.status, "a project no plugin owns is public: %s", r.body)

		r = f.get("/")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, r.body, "live")
		require.NotContains(t, r.body, "bt-scoring", "a plugin's project is not on the index page")
		r = f.get("/projects.json")
		require.Equal(t, http.StatusOK, r.status)
		require.NotContains(t, r.body, "bt-scoring", "nor in projects.json")
		require.Contains(t, r.body, `"live"`)
	})
}
