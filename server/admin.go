package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// AdminEngine is what the admin API needs from the engine.
type AdminEngine interface {
	CreateProject(ctx context.Context, slug string, patch queues.SettingsPatch) (queues.Project, error)
	UpdateProject(ctx context.Context, slug string, patch queues.SettingsPatch) (queues.Project, error)
	Project(ctx context.Context, slug string) (queues.Project, error)
	Projects(ctx context.Context) ([]string, error)
	Enqueue(ctx context.Context, slug string, target queues.Target, items []queues.QueueItem) (queues.EnqueueResult, error)
	EnqueueRegistered(ctx context.Context, slug string, q queues.Queue, items []string) (queues.BackfeedResult, error)
	Counts(ctx context.Context, slug string) (queues.Counts, error)
	Stats(ctx context.Context, slug string) (queues.Stats, error)
	Release(ctx context.Context, slug string, items []string, onlyDownloader string) (queues.ReleaseResult, error)
	ReleaseClaims(ctx context.Context, slug string, filter queues.ReleaseFilter) (queues.ReleaseResult, error)
	Block(ctx context.Context, slug, who string, entry queues.BlockEntry) error
	Unblock(ctx context.Context, slug, who string) (bool, error)
	BlockGlobally(ctx context.Context, who string, entry queues.BlockEntry) error
	UnblockGlobally(ctx context.Context, who string) (bool, error)
	Blocks(ctx context.Context, slug string) (map[string]queues.BlockEntry, error)
	UpdateLimitGroups(ctx context.Context, slug string, groups []queues.LimitGroup) (bool, error)
	Reroute(ctx context.Context, slug string) (queues.SiftResult, error)
	Move(ctx context.Context, slug string, req queues.MoveRequest) (queues.SiftResult, error)
	MovePreview(ctx context.Context, slug string, req queues.MoveRequest) (queues.SiftResult, error)
	RecordChange(ctx context.Context, slug string, entry queues.ChangeEntry) error
	Changes(ctx context.Context, slug string, n int) ([]queues.ChangeEntry, error)
	AllChanges(ctx context.Context, n int) ([]queues.ChangeEntry, error)
	DeleteProject(ctx context.Context, slug string, force bool) (queues.DeleteResult, error)
	Claims(ctx context.Context, slug string, filter queues.ClaimFilter, cursor queues.ClaimCursor, limit int) ([]queues.Claim, queues.ClaimCursor, error)
	EachClaim(ctx context.Context, slug string, filter queues.ClaimFilter, fn func(queues.Claim) bool) error
	ValidateImport(done []string, claims []queues.ImportedClaim, downloaders map[string]queues.ImportedDownloader, domainBytes map[string]int64) error
	ImportDone(ctx context.Context, slug string, items []string) (queues.ImportResult, error)
	ImportClaims(ctx context.Context, slug string, claims []queues.ImportedClaim) (queues.ImportResult, error)
	ImportDownloaders(ctx context.Context, slug string, downloaders map[string]queues.ImportedDownloader, domainBytes map[string]int64) error
	Doctor(ctx context.Context, slug string) (queues.DoctorReport, error)
	FailedItems(ctx context.Context, slug string, cursor uint64, limit int) ([]queues.FailedItem, uint64, error)
	EachFailed(ctx context.Context, slug string, fn func(queues.FailedItem) bool) error
	RequeueFailed(ctx context.Context, slug string, q queues.Queue, items []string) (queues.FailedMoveResult, error)
	DeleteFailed(ctx context.Context, slug string, items []string) (queues.FailedMoveResult, error)
	Filters(ctx context.Context, slug string) ([]queues.Filter, error)
	AddFilter(ctx context.Context, slug string, f queues.Filter) error
	RemoveFilter(ctx context.Context, slug, name string) error
	SiftFilters(ctx context.Context, slug string) (queues.SiftResult, error)
}

// AdminAPI is the operators' API under /api/v1. Every call needs the admin
// token; every change is logged with who made it.
type AdminAPI struct {
	Engine AdminEngine
	Logger *slog.Logger
	// MaxBodyBytes caps request bodies (item batches are the big ones).
	MaxBodyBytes int64
	// Offloader serves the segment and export calls; nil answers 503.
	Offloader OffloadEngine
	// Functions prunes stale function libraries; nil answers 503.
	Functions FunctionPruner
}

// ActorHeader is the header older CLIs sent to name the operator. It is
// no longer read: the admin log names the account the call authenticated
// as (actor, auth.go), never what a client says of itself.
const ActorHeader = "X-Hoard-Actor"

func (a *AdminAPI) register(g *gin.RouterGroup) {
	g.GET("/projects", a.listProjects)
	g.POST("/projects/:slug", a.createProject)
	g.GET("/projects/:slug", a.showProject)
	g.PATCH("/projects/:slug", a.updateProject)
	g.DELETE("/projects/:slug", a.deleteProject)
	g.GET("/projects/:slug/claims", a.listClaims)
	g.GET("/projects/:slug/claims/export", a.exportClaims)
	g.GET("/projects/:slug/counts", a.counts)
	g.GET("/projects/:slug/stats", a.stats)
	g.GET("/projects/:slug/doctor", a.doctor)
	g.POST("/projects/:slug/items", a.addItems)
	g.POST("/projects/:slug/import", a.importState)
	g.POST("/projects/:slug/claims/release", a.releaseClaims)
	g.GET("/projects/:slug/blocks", a.listBlocks)
	g.PUT("/projects/:slug/blocks/:who", a.block)
	g.DELETE("/projects/:slug/blocks/:who", a.unblock)
	g.PUT("/projects/:slug/limit-groups", a.setLimitGroups)
	g.POST("/projects/:slug/queues/move", a.move)
	g.POST("/projects/:slug/queues/reroute", a.reroute)
	g.GET("/projects/:slug/log", a.changes)
	g.GET("/blocks", a.listBlocks)
	g.PUT("/blocks/:who", a.block)
	g.DELETE("/blocks/:who", a.unblock)
	g.GET("/log", a.changes)
	g.POST("/functions/prune", a.pruneFunctions)
	a.registerOffload(g)
	a.registerFailed(g)
	a.registerFilters(g)
}

// logChange records a change in hoard's log and in the project's (or the
// global) admin log in Redis, which operators read back with GET …/log.
// Secrets never go into either log in clear: callers pass settings and
// patches through withoutSecret first.
func (a *AdminAPI) logChange(c *gin.Context, what string, attrs ...any) {
	a.recordChange(c, c.Param("slug"), c.Param("slug"), what, attrs...)
}

// recordChange logs a change about project (or "") into the admin log of
// logSlug ("" = the global log).
func (a *AdminAPI) recordChange(c *gin.Context, project, logSlug, what string, attrs ...any) {
	a.Logger.InfoContext(c.Request.Context(), "admin change: "+what,
		append([]any{"project", project, "by", actor(c), "addr", c.ClientIP()}, attrs...)...)
	details := map[string]any{}
	for i := 0; i+1 < len(attrs); i += 2 {
		if k, ok := attrs[i].(string); ok {
			details[k] = attrs[i+1]
		}
	}
	raw, _ := json.Marshal(details)
	entry := queues.ChangeEntry{By: actor(c), What: what, Details: raw}
	if logSlug == "" {
		entry.Project = project
	}
	if err := a.Engine.RecordChange(c.Request.Context(), logSlug, entry); err != nil {
		a.Logger.ErrorContext(c.Request.Context(), "could not record an admin change", "err", err)
	}
}

// withoutSecret returns v (settings or a settings patch) as a JSON object
// with its backfeed secret replaced by the secret's fingerprint,
// "secret_fp", so the logs can tell a secret changed, and to which one,
// without showing it.
func withoutSecret(v any) map[string]any {
	raw, _ := json.Marshal(v)
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return map[string]any{}
	}
	if secret, ok := m["backfeed_secret"].(string); ok {
		delete(m, "backfeed_secret")
		m["secret_fp"] = queues.SecretFingerprint(secret)
	}
	return m
}

// decode reads an admin body, refusing unknown fields by name.
func (a *AdminAPI) decode(c *gin.Context, dst any) bool {
	return bindStrictJSON(c, a.MaxBodyBytes, dst)
}

// listProjects lists the projects the caller may read: every one for an
// admin or a viewer of all, the ones its roles name otherwise.
func (a *AdminAPI) listProjects(c *gin.Context) {
	slugs, err := a.Engine.Projects(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	if roles := principal(c).Roles; !roles.ReadsAll() {
		slugs = slices.DeleteFunc(slugs, func(slug string) bool { return !roles.CanRead(slug) })
	}
	if slugs == nil {
		slugs = []string{}
	}
	c.JSON(http.StatusOK, gin.H{"projects": slugs})
}

func (a *AdminAPI) createProject(c *gin.Context) {
	var patch queues.SettingsPatch
	if c.Request.ContentLength != 0 {
		if !a.decode(c, &patch) {
			return
		}
	}
	project, err := a.Engine.CreateProject(c.Request.Context(), c.Param("slug"), patch)
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "project created", "settings", withoutSecret(project.Settings))
	c.JSON(http.StatusCreated, project)
}

func (a *AdminAPI) showProject(c *gin.Context) {
	project, err := a.Engine.Project(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	counts, err := a.Engine.Counts(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	if !principal(c).Roles.CanWrite(project.Slug) {
		// A viewer reads the settings, not the backfeed secret: its
		// fingerprint tells whether it changed.
		c.JSON(http.StatusOK, gin.H{"project": withoutSecret(project), "counts": counts})
		return
	}
	c.JSON(http.StatusOK, gin.H{"project": project, "counts": counts})
}

func (a *AdminAPI) updateProject(c *gin.Context) {
	var patch queues.SettingsPatch
	if !a.decode(c, &patch) {
		return
	}
	project, err := a.Engine.UpdateProject(c.Request.Context(), c.Param("slug"), patch)
	if err != nil {
		_ = c.Error(err)
		return
	}
	changed, _ := json.Marshal(withoutSecret(patch))
	a.logChange(c, "settings changed", "patch", string(changed))
	c.JSON(http.StatusOK, project)
}

func (a *AdminAPI) counts(c *gin.Context) {
	counts, err := a.Engine.Counts(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, counts)
}

// doctor checks the project's keys (queues.Doctor): the scripts trust
// their types rather than checking them on every call.
func (a *AdminAPI) doctor(c *gin.Context) {
	report, err := a.Engine.Doctor(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, report)
}

func (a *AdminAPI) stats(c *gin.Context) {
	stats, err := a.Engine.Stats(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, stats)
}

// AddItemsRequest queues a batch. Items are strings or
// {"name": ..., "extras": {...}} objects.
type AddItemsRequest struct {
	Queue      string            `json:"queue"`
	Downloader string            `json:"downloader"`
	Items      []json.RawMessage `json:"items"`
	// Register adds the items to the backfeed Bloom filter too, so
	// backfeed never queues them again; items it has seen are skipped.
	// Not with a downloader's reserved queue, nor with extras.
	Register bool `json:"register"`
}

// Rejection says why one entry of a batch was not queued.
type Rejection struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// AddItemsResponse reports a batch: malformed entries are rejected and
// counted, items already out or done are skipped, items already waiting in
// a queue are counted as already queued (and, with register, items the
// backfeed filter knew as already registered), the rest are queued.
type AddItemsResponse struct {
	Queued            int         `json:"queued"`
	Skipped           int         `json:"skipped"`
	AlreadyQueued     int         `json:"already_queued"`
	AlreadyRegistered int         `json:"already_registered,omitempty"`
	Rejected          int         `json:"rejected"`
	Rejections        []Rejection `json:"rejections,omitempty"`
	// Filtered counts the items the project's filters dropped.
	Filtered int   `json:"filtered"`
	Length   int64 `json:"length"`
}

func (a *AdminAPI) addItems(c *gin.Context) {
	var req AddItemsRequest
	if !a.decode(c, &req) {
		return
	}
	target := queues.Target{Downloader: req.Downloader}
	if req.Downloader == "" {
		q, err := queues.ParseQueue(req.Queue)
		if err != nil {
			_ = c.Error(err)
			return
		}
		target.Queue = q
	}
	if len(req.Items) > queues.MaxEnqueueBatch {
		_ = c.Error(badRequest("%d items in one batch; the limit is %d", len(req.Items), queues.MaxEnqueueBatch))
		return
	}
	var resp AddItemsResponse
	items := make([]queues.QueueItem, 0, len(req.Items))
	reject := func(i int, err error) {
		resp.Rejected++
		if len(resp.Rejections) < 20 {
			msg := err.Error()
			var qe *queues.Error
			if ok := asQueuesError(err, &qe); ok {
				msg = qe.Message
			}
			resp.Rejections = append(resp.Rejections, Rejection{Index: i, Error: msg})
		}
	}
	for i, raw := range req.Items {
		var item queues.QueueItem
		if len(raw) > 0 && raw[0] == '"' {
			if err := json.Unmarshal(raw, &item.Name); err != nil {
				reject(i, err)
				continue
			}
		} else if err := decodeStrictJSON(raw, &item); err != nil {
			msg := err.Error()
			var qe *queues.Error
			if asQueuesError(err, &qe) {
				msg = qe.Message
			}
			reject(i, badRequest("want a string or {\"name\", \"extras\"}: %s", msg))
			continue
		}
		// A control character refuses the whole batch, naming the item:
		// it means the input is not the list of names the operator thinks
		// (a binary or terminal-coloured file), so none of it is queued
		// (nothing is, before this loop ends). The other checks reject
		// their entry only, as before.
		if at, r := queues.FindControl(item.Name); at >= 0 {
			_ = c.Error(badRequest("item at index %d has the control character U+%04X at byte offset %d; nothing was queued", i, r, at))
			return
		}
		if err := queues.ValidateItem(item.Name); err != nil {
			reject(i, err)
			continue
		}
		if len(item.Extras) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(item.Extras, &obj); err != nil {
				reject(i, badRequest("extras must be a JSON object"))
				continue
			}
			if _, ok := obj["item_name"]; ok {
				reject(i, badRequest("extras may not set item_name"))
				continue
			}
		}
		items = append(items, item)
	}
	if req.Register {
		if target.Downloader != "" {
			_ = c.Error(badRequest("register works with the shared queues, not a reserved queue"))
			return
		}
		names := make([]string, 0, len(items))
		for _, item := range items {
			if len(item.Extras) > 0 {
				_ = c.Error(badRequest("register does not take items with extras"))
				return
			}
			names = append(names, item.Name)
		}
		result, err := a.Engine.EnqueueRegistered(c.Request.Context(), c.Param("slug"), target.Queue, names)
		if err != nil {
			_ = c.Error(err)
			return
		}
		resp.Queued, resp.Skipped, resp.AlreadyQueued = result.New, result.Placed, result.Waiting
		resp.AlreadyRegistered = result.Duplicate - result.Placed - result.Waiting
		resp.Filtered = result.Filtered
	} else {
		result, err := a.Engine.Enqueue(c.Request.Context(), c.Param("slug"), target, items)
		if err != nil {
			_ = c.Error(err)
			return
		}
		resp.Queued, resp.Skipped, resp.AlreadyQueued, resp.Length = result.Queued, result.Skipped, result.AlreadyQueued, result.Length
		resp.Filtered = result.Filtered
	}
	a.logChange(c, "items queued", "queue", target.Queue, "downloader", target.Downloader,
		"queued", resp.Queued, "skipped", resp.Skipped, "already_queued", resp.AlreadyQueued,
		"already_registered", resp.AlreadyRegistered, "rejected", resp.Rejected, "filtered", resp.Filtered)
	c.JSON(http.StatusOK, resp)
}

// ReleaseRequest selects claims to release: listed items, or every claim
// matching older_than and downloader.
type ReleaseRequest struct {
	OlderThan  queues.Duration `json:"older_than"`
	Downloader string          `json:"downloader"`
	Items      []string        `json:"items"`
}

func (a *AdminAPI) releaseClaims(c *gin.Context) {
	var req ReleaseRequest
	if !a.decode(c, &req) {
		return
	}
	var (
		result queues.ReleaseResult
		err    error
	)
	if len(req.Items) > 0 {
		result, err = a.Engine.Release(c.Request.Context(), c.Param("slug"), req.Items, req.Downloader)
	} else {
		result, err = a.Engine.ReleaseClaims(c.Request.Context(), c.Param("slug"), queues.ReleaseFilter{
			OlderThan: time.Duration(req.OlderThan), Downloader: req.Downloader})
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "claims released", "older_than", time.Duration(req.OlderThan).String(),
		"downloader", req.Downloader, "items", len(req.Items), "released", result.Released)
	c.JSON(http.StatusOK, result)
}

type blockRequest struct {
	Reason string `json:"reason"`
}

func (a *AdminAPI) block(c *gin.Context) {
	var req blockRequest
	if c.Request.ContentLength != 0 && !a.decode(c, &req) {
		return
	}
	if len(req.Reason) > 500 {
		_ = c.Error(badRequest("reason is longer than 500 bytes"))
		return
	}
	entry := queues.BlockEntry{Reason: req.Reason, By: actor(c)}
	var err error
	if c.Param("slug") == "" {
		err = a.Engine.BlockGlobally(c.Request.Context(), c.Param("who"), entry)
	} else {
		err = a.Engine.Block(c.Request.Context(), c.Param("slug"), c.Param("who"), entry)
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "blocked", "who", c.Param("who"), "reason", req.Reason)
	c.JSON(http.StatusOK, gin.H{"blocked": c.Param("who")})
}

func (a *AdminAPI) unblock(c *gin.Context) {
	var found bool
	var err error
	if c.Param("slug") == "" {
		found, err = a.Engine.UnblockGlobally(c.Request.Context(), c.Param("who"))
	} else {
		found, err = a.Engine.Unblock(c.Request.Context(), c.Param("slug"), c.Param("who"))
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	if !found {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "not_blocked", Message: "not blocked"})
		return
	}
	a.logChange(c, "unblocked", "who", c.Param("who"))
	c.JSON(http.StatusOK, gin.H{"unblocked": c.Param("who")})
}

func (a *AdminAPI) listBlocks(c *gin.Context) {
	blocks, err := a.Engine.Blocks(c.Request.Context(), c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"blocks": blocks})
}

// setLimitGroups replaces the project's limit groups, records the change,
// and, when a matcher changed, re-routes queued items before answering. The
// re-route runs on its own context: a client that goes away does not cut it
// off. If it is cut off anyway (the process stops), nothing is stranded:
// claims serve a removed group's items without limit, and
// POST …/queues/reroute finishes the job.
func (a *AdminAPI) setLimitGroups(c *gin.Context) {
	var req struct {
		Groups []queues.LimitGroup `json:"groups"`
	}
	if !a.decode(c, &req) {
		return
	}
	rerouteNeeded, err := a.Engine.UpdateLimitGroups(c.Request.Context(), c.Param("slug"), req.Groups)
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "limit groups set", "groups", req.Groups, "reroute", rerouteNeeded)
	var result queues.SiftResult
	if rerouteNeeded {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 6*time.Hour)
		defer cancel()
		if result, err = a.Engine.Reroute(ctx, c.Param("slug")); err != nil {
			_ = c.Error(err)
			return
		}
	}
	c.JSON(http.StatusOK, gin.H{"groups": req.Groups, "rerouted": result})
}

func (a *AdminAPI) reroute(c *gin.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 6*time.Hour)
	defer cancel()
	result, err := a.Engine.Reroute(ctx, c.Param("slug"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "queues re-routed", "moved", result.Moved)
	c.JSON(http.StatusOK, result)
}

// MoveQueueRequest moves queued items between queues, by pattern, count or
// both. Exactly one of type, glob and regex may be given. With dry_run the
// reply says how many items the move would take ("moved") and changes
// nothing.
type MoveQueueRequest struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Type   string `json:"type,omitempty"`
	Glob   string `json:"glob,omitempty"`
	Regex  string `json:"regex,omitempty"`
	Count  int    `json:"count,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

func (a *AdminAPI) move(c *gin.Context) {
	var req MoveQueueRequest
	if !a.decode(c, &req) {
		return
	}
	move := queues.MoveRequest{From: queues.Queue(req.From), To: queues.Queue(req.To), Count: req.Count}
	if req.Type != "" || req.Glob != "" || req.Regex != "" {
		move.Match = &queues.LimitGroup{Type: req.Type, Glob: req.Glob, Regex: req.Regex}
	}
	if req.DryRun {
		preview, err := a.Engine.MovePreview(c.Request.Context(), c.Param("slug"), move)
		if err != nil {
			_ = c.Error(err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"moved": preview.Moved, "scanned": preview.Scanned, "dry_run": true})
		return
	}
	result, err := a.Engine.Move(c.Request.Context(), c.Param("slug"), move)
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.logChange(c, "items moved", "request", req, "moved", result.Moved)
	c.JSON(http.StatusOK, result)
}

// changes serves a project's log (…/projects/:slug/log) or, at /log,
// every change, global and per project, newest first; /log?scope=global
// shows only the global log.
func (a *AdminAPI) changes(c *gin.Context) {
	var entries []queues.ChangeEntry
	var err error
	switch scope := c.Query("scope"); {
	case c.Param("slug") != "" || scope == "global":
		entries, err = a.Engine.Changes(c.Request.Context(), c.Param("slug"), 200)
	case scope == "" || scope == "all":
		entries, err = a.Engine.AllChanges(c.Request.Context(), 200)
	default:
		err = badRequest("scope must be all (the default) or global, not %q", scope)
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"changes": entries})
}

// DeleteProjectReply reports a deletion.
type DeleteProjectReply struct {
	Deleted string `json:"deleted"`
	queues.DeleteResult
	// Files is how many segment and archive files this frontend removed.
	Files int `json:"files"`
}

// deleteProject serves DELETE /projects/:slug?confirm=<slug>[&force=true]:
// it removes the project's keys and this frontend's files for it, and
// records the deletion in the global admin log (the project's own goes
// with it). The confirm parameter must repeat the slug, so a stray DELETE
// cannot remove a project; with items out it refuses unless force is set.
func (a *AdminAPI) deleteProject(c *gin.Context) {
	slug := c.Param("slug")
	if err := queues.ValidateSlug(slug); err != nil {
		_ = c.Error(err)
		return
	}
	if c.Query("confirm") != slug {
		_ = c.Error(badRequest("deleting project %q removes its queues, claims, done items, stats and files; confirm with ?confirm=%s", slug, slug))
		return
	}
	force, err := strconv.ParseBool(c.DefaultQuery("force", "false"))
	if err != nil {
		_ = c.Error(badRequest("force must be true or false"))
		return
	}
	result, err := a.Engine.DeleteProject(c.Request.Context(), slug, force)
	if err != nil {
		_ = c.Error(err)
		return
	}
	reply := DeleteProjectReply{Deleted: slug, DeleteResult: result}
	if a.Offloader != nil {
		if reply.Files, err = a.Offloader.RemoveProjectFiles(c.Request.Context(), slug); err != nil {
			a.Logger.ErrorContext(c.Request.Context(), "project deleted, but its files were not all removed", "project", slug, "err", err)
		}
	}
	a.recordChange(c, slug, "", "project deleted", "keys", reply.Keys, "files", reply.Files,
		"claims_out", reply.ClaimsOut, "force", force)
	c.JSON(http.StatusOK, reply)
}

// claimFilter reads the downloader and older_than query parameters.
func claimFilter(c *gin.Context) (queues.ClaimFilter, error) {
	filter := queues.ClaimFilter{Downloader: c.Query("downloader")}
	if raw := c.Query("older_than"); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return filter, badRequest("older_than %q is not a duration like 30m, 6h or 2h30m", raw)
		}
		filter.OlderThan = d
	}
	return filter, nil
}

// ClaimsPage is a page of GET …/claims; pass Next back as cursor for the
// following page ("" = no more).
type ClaimsPage struct {
	Claims []queues.Claim `json:"claims"`
	Next   string         `json:"next"`
}

// DefaultClaimsPage is the page size of GET …/claims without limit.
const DefaultClaimsPage = 1000

// listClaims serves GET /projects/:slug/claims[?downloader=&older_than=
// &limit=&cursor=]: who holds which items, earliest reclaim deadline first
// (oldest claim first for claims made under one TTL).
func (a *AdminAPI) listClaims(c *gin.Context) {
	filter, err := claimFilter(c)
	if err != nil {
		_ = c.Error(err)
		return
	}
	limit := DefaultClaimsPage
	if raw := c.Query("limit"); raw != "" {
		if limit, err = strconv.Atoi(raw); err != nil {
			_ = c.Error(badRequest("limit %q is not a number", raw))
			return
		}
	}
	cursor, err := queues.ParseClaimCursor(c.Query("cursor"))
	if err != nil {
		_ = c.Error(err)
		return
	}
	claims, next, err := a.Engine.Claims(c.Request.Context(), c.Param("slug"), filter, cursor, limit)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if claims == nil {
		claims = []queues.Claim{}
	}
	c.JSON(http.StatusOK, ClaimsPage{Claims: claims, Next: next.String()})
}

// exportClaims serves GET /projects/:slug/claims/export[?downloader=
// &older_than=]: every claim the filters select as text lines "item TAB
// downloader TAB claimed-at (RFC 3339, ms, UTC)", earliest deadline first,
// streamed a page of the deadlines at a time, with the line count in the export trailer.
func (a *AdminAPI) exportClaims(c *gin.Context) {
	filter, err := claimFilter(c)
	if err != nil {
		_ = c.Error(err)
		return
	}
	a.stream(c, func(w io.Writer) (int64, error) {
		var n int64
		var line []byte
		var werr error
		err := a.Engine.EachClaim(c.Request.Context(), c.Param("slug"), filter, func(claim queues.Claim) bool {
			line = append(line[:0], claim.Item...)
			line = append(line, '\t')
			line = append(line, claim.Downloader...)
			line = append(line, '\t')
			line = claim.ClaimedAt.UTC().AppendFormat(line, ClaimTimeFormat)
			line = append(line, '\n')
			if _, werr = w.Write(line); werr != nil {
				return false
			}
			n++
			return true
		})
		if err == nil {
			err = werr
		}
		return n, err
	})
}

// ClaimTimeFormat is how claim exports write times.
const ClaimTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// ImportRequest carries another tracker's done items, claims and
// downloader totals into a project (hoard queue import-universal); each
// part is optional, done and claims at most queues.MaxImportBatch each.
type ImportRequest struct {
	Done        []string                             `json:"done,omitempty"`
	Claims      []queues.ImportedClaim               `json:"claims,omitempty"`
	Downloaders map[string]queues.ImportedDownloader `json:"downloaders,omitempty"`
	DomainBytes map[string]int64                     `json:"domain_bytes,omitempty"`
}

// ImportResponse says what was imported and skipped (already out or done
// here, so an import can run twice).
type ImportResponse struct {
	Done        queues.ImportResult `json:"done"`
	Claims      queues.ImportResult `json:"claims"`
	Downloaders int                 `json:"downloaders"`
}

func (a *AdminAPI) importState(c *gin.Context) {
	slug := c.Param("slug")
	var req ImportRequest
	if !a.decode(c, &req) {
		return
	}
	ctx := c.Request.Context()
	// Every part is checked before any is written: bad input changes nothing.
	if err := a.Engine.ValidateImport(req.Done, req.Claims, req.Downloaders, req.DomainBytes); err != nil {
		_ = c.Error(err)
		return
	}
	var resp ImportResponse
	var err error
	if resp.Done, err = a.Engine.ImportDone(ctx, slug, req.Done); err != nil {
		_ = c.Error(err)
		return
	}
	if resp.Claims, err = a.Engine.ImportClaims(ctx, slug, req.Claims); err != nil {
		_ = c.Error(err)
		return
	}
	if len(req.Downloaders) > 0 || len(req.DomainBytes) > 0 {
		if err = a.Engine.ImportDownloaders(ctx, slug, req.Downloaders, req.DomainBytes); err != nil {
			_ = c.Error(err)
			return
		}
		resp.Downloaders = len(req.Downloaders)
	}
	if resp.Done.Imported+resp.Claims.Imported+resp.Downloaders > 0 {
		a.logChange(c, "state imported", "done", resp.Done.Imported, "claims", resp.Claims.Imported, "downloaders", resp.Downloaders)
	}
	c.JSON(http.StatusOK, resp)
}
