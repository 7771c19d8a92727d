package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// ProjectLister is what projects.json needs from the engine.
type ProjectLister interface {
	Project(ctx context.Context, slug string) (queues.Project, error)
	// Availability says whether a warrior asking now would get work.
	Availability(ctx context.Context, slug string) (queues.Availability, error)
}

// AutoCandidatesKey is the operator's key in projects.json listing, in
// order, the projects auto_project may name (a hoard extension; warriors
// ignore it): hoard names the first that has work, is not paused and has
// rate to spare, so warriors set to "auto" go where there is work
// (seesaw-kit#89, #119). With none open, the file's own auto_project stays.
const AutoCandidatesKey = "auto_project_candidates"

// ProjectsFile serves the Warrior HQ projects.json (warrior-protocol.md §5)
// from the operator's file, merged with hoard's project state: paused
// projects are withheld so warriors deselect them, and projects hosted here
// get their leaderboard link filled in.
type ProjectsFile struct {
	Path      string
	Engine    ProjectLister
	PublicURL string // e.g. https://tracker.example.org; "" = leave links alone
	// CacheFor bounds how stale the merged document may be.
	CacheFor time.Duration
	// Access, when set, leaves the plugins' private projects out.
	Access PluginAccess
	// Clock times the cache; nil is the wall clock.
	Clock queues.Clock

	mu       sync.Mutex
	cached   []byte
	cachedAt time.Time
	modTime  time.Time
}

var jsonpCallback = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$.]{0,63}$`)

// Serve answers GET /projects.json, or JSONP with ?callback= as Warrior HQ does.
func (p *ProjectsFile) Serve(c *gin.Context) {
	doc, err := p.document(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	if cb := c.Query("callback"); cb != "" {
		if !jsonpCallback.MatchString(cb) {
			_ = c.Error(badRequest("callback must be a JavaScript identifier"))
			return
		}
		c.Header("X-Content-Type-Options", "nosniff")
		c.Data(http.StatusOK, "application/javascript", []byte(cb+"("+string(doc)+");"))
		return
	}
	c.Data(http.StatusOK, "application/json", doc)
}

// SetPath serves another file from now on (a reload), and drops the
// cached document so even the same path is read again at once.
func (p *ProjectsFile) SetPath(path string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Path, p.cached = path, nil
}

func (p *ProjectsFile) path() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Path
}

func (p *ProjectsFile) document(ctx context.Context) ([]byte, error) {
	path := p.path()
	info, err := os.Stat(path)
	if err != nil {
		return nil, &httpError{Status: http.StatusNotFound, Code: "no_projects_file", Message: "no projects.json is configured on this server"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Clock == nil {
		p.Clock = queues.SystemClock{}
	}
	if p.cached != nil && info.ModTime().Equal(p.modTime) && p.Clock.Now().Sub(p.cachedAt) < p.CacheFor {
		return p.cached, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, &queues.Error{Op: "server.ProjectsFile", Code: queues.CodeUnavailable, Message: "cannot read projects.json", Err: err}
	}
	doc, err := p.merge(ctx, raw)
	if err != nil {
		return nil, err
	}
	p.cached, p.cachedAt, p.modTime = doc, p.Clock.Now(), info.ModTime()
	return doc, nil
}

// merge keeps every key of the operator's file as written, and changes only
// the projects list.
func (p *ProjectsFile) merge(ctx context.Context, raw []byte) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, &queues.Error{Op: "server.ProjectsFile", Code: queues.CodeUnavailable,
			Message: "projects.json on the server is not a JSON object", Err: err}
	}
	var entries []map[string]json.RawMessage
	if list, ok := doc["projects"]; ok {
		if err := json.Unmarshal(list, &entries); err != nil {
			return nil, &queues.Error{Op: "server.ProjectsFile", Code: queues.CodeUnavailable,
				Message: "projects.json: \"projects\" is not a list of objects", Err: err}
		}
	}
	kept := make([]map[string]json.RawMessage, 0, len(entries))
	for _, entry := range entries {
		var name string
		_ = json.Unmarshal(entry["name"], &name)
		if p.Access != nil && p.Access.PrivateProject(name) {
			continue
		}
		project, err := p.Engine.Project(ctx, name)
		switch queues.CodeOf(err) {
		case 0:
			if project.Paused {
				continue
			}
			var leaderboard string
			_ = json.Unmarshal(entry["leaderboard"], &leaderboard)
			if p.PublicURL != "" && leaderboard == "" {
				entry["leaderboard"], _ = json.Marshal(strings.TrimSuffix(p.PublicURL, "/") + "/" + name + "/")
			}
		case queues.CodeProjectNotFound, queues.CodeInvalid:
			// Listed here but hosted elsewhere: passed through untouched.
		default:
			return nil, err
		}
		kept = append(kept, entry)
	}
	var err error
	if doc["projects"], err = json.Marshal(kept); err != nil {
		return nil, fmt.Errorf("encode projects: %w", err)
	}
	if err := p.chooseAutoProject(ctx, doc, kept); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// chooseAutoProject sets auto_project to the first of the operator's
// candidates that is listed (so a warrior can find it), hosted here, and
// open: it has work a warrior may be handed, is not paused and has rate
// to spare. A candidate hosted elsewhere cannot be judged and is passed
// over; with no open candidate the file's own auto_project stays.
func (p *ProjectsFile) chooseAutoProject(ctx context.Context, doc map[string]json.RawMessage, listed []map[string]json.RawMessage) error {
	raw, ok := doc[AutoCandidatesKey]
	if !ok {
		return nil
	}
	var candidates []string
	if err := json.Unmarshal(raw, &candidates); err != nil {
		return &queues.Error{Op: "server.ProjectsFile", Code: queues.CodeUnavailable,
			Message: "projects.json: \"" + AutoCandidatesKey + "\" is not a list of project names", Err: err}
	}
	present := make(map[string]bool, len(listed))
	for _, entry := range listed {
		var name string
		_ = json.Unmarshal(entry["name"], &name)
		present[name] = true
	}
	for _, name := range candidates {
		if !present[name] {
			continue
		}
		a, err := p.Engine.Availability(ctx, name)
		switch queues.CodeOf(err) {
		case 0:
		case queues.CodeProjectNotFound, queues.CodeInvalid:
			continue
		default:
			return err
		}
		if a.Open() {
			doc["auto_project"], _ = json.Marshal(name)
			return nil
		}
	}
	return nil
}
