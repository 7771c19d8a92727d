package server

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/internal/jsonstring"
	"github.com/hoardproject/hoard/queues"
)

// WarriorEngine is what the warrior API needs from the engine.
type WarriorEngine interface {
	Claim(ctx context.Context, req queues.ClaimRequest) (queues.ClaimResult, error)
	Done(ctx context.Context, req queues.DoneRequest) (queues.DoneResult, error)
	Release(ctx context.Context, slug string, items []string, onlyDownloader string) (queues.ReleaseResult, error)
	ReportFailure(ctx context.Context, req queues.FailRequest) (queues.FailResult, error)
	ItemStatus(ctx context.Context, slug, item string) (queues.ItemStatus, error)
	Project(ctx context.Context, slug string) (queues.Project, error)
}

// WarriorAPI serves the seesaw tracker protocol (warrior-protocol.md §1).
type WarriorAPI struct {
	Engine WarriorEngine
	// MaxBodyBytes caps request bodies; larger ones get 400.
	MaxBodyBytes int64
	// StatsJSON serves GET /<slug>/stats.json (server/stats.go); nil: 404.
	StatsJSON *StatsJSON
	// Pages serves the leaderboard page, its websocket and chart data.
	Pages *Pages
	// Access, when set, refuses the plugins' work to callers without a
	// worker token for it (see PluginAccess).
	Access PluginAccess
}

// warriorRoute is a parsed warrior path.
type warriorRoute struct {
	Slug   string
	Action string // request, done, upload, release or fail
	Multi  int    // items wanted; 1 unless the path says multi=N
}

// parseWarriorPath routes on the raw path, because production pipelines
// use "<slug>/multi=N/" as their tracker URL and seesaw appends "/request",
// giving "/<slug>/multi=N//request". A redirect to a cleaned path would cost
// every warrior a round trip (and turn into a GET on 302/303).
func parseWarriorPath(path string) (warriorRoute, bool, error) {
	// The path's segments, cut without a slice allocated per request:
	// a warrior path has at most four.
	var segments [4]string
	parts, rest, ok := segments[:0], strings.TrimPrefix(path, "/"), true
	for ok && len(parts) < len(segments) {
		var part string
		part, rest, ok = strings.Cut(rest, "/")
		parts = append(parts, part)
	}
	route := warriorRoute{Multi: 1}
	if ok { // more than four segments
		return route, false, nil
	}
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && strings.HasPrefix(parts[1], "multi="):
	case len(parts) == 4 && strings.HasPrefix(parts[1], "multi=") && parts[2] == "":
	default:
		return route, false, nil
	}
	route.Slug, route.Action = parts[0], parts[len(parts)-1]
	switch route.Action {
	case "request", "done", "upload", "release", "fail":
	default:
		return route, false, nil
	}
	if len(parts) > 2 {
		digits := strings.TrimPrefix(parts[1], "multi=")
		// Digits only: Atoi also takes "+5" and "-0", which no tracker
		// URL means.
		n, err := strconv.Atoi(digits)
		if err != nil || strings.Trim(digits, "0123456789") != "" || n < 1 || n > queues.MaxMulti {
			return route, true, badRequest("multi=N needs N between 1 and %d", queues.MaxMulti)
		}
		route.Multi = n
	}
	if err := queues.ValidateSlug(route.Slug); err != nil {
		return route, true, err
	}
	return route, true, nil
}

// Dispatch routes every path gin has no route for: warrior calls, or 404.
func (w *WarriorAPI) Dispatch(c *gin.Context) {
	// Metrics and stats.json (server/metrics.go, server/stats.go).
	if slug, ok := statsJSONSlug(c.Request.URL.Path); ok && w.StatsJSON != nil {
		c.Set(routeKey, routeStatsJSON)
		w.StatsJSON.Serve(c, slug)
		return
	}
	// The project page and its live stream (server/pages.go).
	if slug, resource, ok := pagePath(c.Request.URL.Path); ok && w.Pages != nil {
		c.Set(routeKey, pageResources[resource])
		w.Pages.Serve(c, slug, resource)
		return
	}
	// The public item status (server/itemstatus.go).
	if slug, item, ok := itemStatusPath(c.Request.URL.Path); ok {
		c.Set(routeKey, routeItemStatus)
		w.itemStatus(c, slug, item)
		return
	}
	route, ok, err := parseWarriorPath(c.Request.URL.Path)
	if ok {
		c.Set(routeKey, warriorRouteLabel(route, c.Request.URL.Path))
	}
	if !ok {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_route", Message: "no such endpoint"})
		return
	}
	if c.Request.Method != http.MethodPost {
		c.Header("Allow", http.MethodPost)
		_ = c.Error(&httpError{Status: http.StatusMethodNotAllowed, Code: "method", Message: "warrior calls are POSTs"})
		return
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	if !w.mayWork(c, route.Slug) {
		return
	}
	switch route.Action {
	case "request", "done", "fail":
		w.answerGin(c, route)
	case "upload":
		w.upload(c, route)
	case "release":
		w.release(c, route)
	}
}

// mayWork refuses a plugin's project to a caller who may not work it
// (workRefusal).
func (w *WarriorAPI) mayWork(c *gin.Context, slug string) bool {
	if err := w.workRefusal(slug, c.GetHeader("Authorization")); err != nil {
		_ = c.Error(err)
		return false
	}
	return true
}

// workRefusal refuses a plugin's project to a caller who may not work it:
// its items are the plugin's steps (scoring rounds, reaper notices), and a
// stranger's claim or done would make the plugin skip one. authorization
// is the request's Authorization header.
func (w *WarriorAPI) workRefusal(slug, authorization string) error {
	if w.Access == nil {
		return nil
	}
	bearer, _ := strings.CutPrefix(authorization, "Bearer ")
	plugin, owned, allowed := w.Access.WarriorAccess(slug, bearer)
	if !owned || allowed {
		return nil
	}
	return &httpError{Status: http.StatusForbidden, Code: "plugin_work", Message: "project " + slug + " holds the " + plugin +
		" plugin's work, which is not public: the plugin's own workers do it, and an outside worker needs a worker token for its item types"}
}

// warriorCall is one request, done or fail as a listener read it: gin
// (answerGin) or the warrior listener (warriorconn.go), which answer it
// with the same code.
type warriorCall struct {
	ctx       context.Context
	route     warriorRoute
	body      []byte
	clientIP  string // gin's ClientIP; only request reads it
	userAgent string
}

// warriorReply is a call's 200 answer.
type warriorReply struct {
	contentType []string
	body        []byte
}

// answeredByCall reports whether answer serves action (the rest are gin's
// handlers alone: rare calls, not worth a second listener's code).
func answeredByCall(action string) bool {
	return action == "request" || action == "done" || action == "fail"
}

// answerGin serves a request, done or fail through gin.
func (w *WarriorAPI) answerGin(c *gin.Context, route warriorRoute) {
	body, err := readBody(c, w.MaxBodyBytes)
	if err != nil {
		_ = c.Error(err)
		return
	}
	call := warriorCall{ctx: c.Request.Context(), route: route, body: body, userAgent: c.Request.UserAgent()}
	if route.Action == "request" {
		call.clientIP = c.ClientIP()
	}
	reply, err := w.answer(&call)
	if err != nil {
		_ = c.Error(err)
		return
	}
	writeReply(c, reply.contentType, reply.body)
}

// answer serves a request, done or fail.
func (w *WarriorAPI) answer(call *warriorCall) (warriorReply, error) {
	switch call.route.Action {
	case "request":
		return w.request(call)
	case "done":
		return w.done(call)
	case "fail":
		return w.fail(call)
	}
	return warriorReply{}, &httpError{Status: http.StatusNotFound, Code: "no_route", Message: "no such endpoint"}
}

type requestBody struct {
	Downloader looseString `json:"downloader"`
	APIVersion looseString `json:"api_version"`
	Version    looseString `json:"version"`
}

func (w *WarriorAPI) request(call *warriorCall) (warriorReply, error) {
	var req requestBody
	if err := decodeJSON(call.body, &req); err != nil {
		return warriorReply{}, err
	}
	result, err := w.Engine.Claim(call.ctx, queues.ClaimRequest{
		Project: call.route.Slug, Downloader: string(req.Downloader), IP: call.clientIP,
		Version: string(req.Version), Count: call.route.Multi,
	})
	if err != nil {
		return warriorReply{}, err
	}
	if len(result.Items) > 1 && req.APIVersion == "2" && !hasProjectExtra(result) {
		// multi=N: the reply is written from the names, not from their
		// join (which json.Marshal escaped whole, for its NULs).
		return warriorReply{contentTypeJSON, multiItemReply(result.Items)}, nil
	}
	var joined string
	if len(result.Items) == 1 {
		joined = result.Items[0].Name // the everyday claim: no list to join
	} else {
		names := make([]string, len(result.Items))
		for i, item := range result.Items {
			names[i] = item.Name
		}
		joined = strings.Join(names, "\x00")
	}
	if req.APIVersion != "2" {
		// universal-tracker's api_version 1: the bare name as text.
		return warriorReply{contentTypeText, []byte(joined)}, nil
	}
	reply, err := itemReply(joined, result)
	if err != nil {
		return warriorReply{}, err
	}
	return warriorReply{contentTypeJSON, reply}, nil
}

// hasProjectExtra: the project's extra keys go into every claim's reply.
func hasProjectExtra(result queues.ClaimResult) bool {
	return len(result.ProjectExtra) > 0 && !bytes.Equal(result.ProjectExtra, []byte("{}"))
}

// multiItemReply builds itemReply's answer for several items and no extra
// keys, {"item_name": "<the names NUL-joined>"}, byte for byte as
// itemReply writes it (TestMultiItemReplyIsItemReplys), in one allocation:
// each name is copied as it is (or escaped alone) and the NULs written as
// \u0000, where escaping the joined names sent them all through
// json.Marshal.
func multiItemReply(items []queues.ClaimedItem) []byte {
	size := len(`{"item_name":""}`) + len(`\u0000`)*len(items)
	for _, item := range items {
		size += len(item.Name)
	}
	reply := make([]byte, 0, size)
	reply = append(reply, `{"item_name":"`...)
	for i, item := range items {
		if i > 0 {
			reply = append(reply, `\u0000`...)
		}
		reply = jsonstring.AppendContents(reply, item.Name)
	}
	return append(reply, `"}`...)
}

// itemReply builds {"item_name": ..., extra keys...}. Seesaw copies every
// key onto the item. Project extras come first, then the item's own (for a
// single item), and item_name always wins.
func itemReply(joined string, result queues.ClaimResult) ([]byte, error) {
	withProjectExtra := hasProjectExtra(result)
	hasItemExtra := len(result.Items) == 1 && len(result.Items[0].Extras) > 0
	if !withProjectExtra && !hasItemExtra {
		// One allocation: the reply itself.
		reply := make([]byte, 0, len(`{"item_name":""}`)+len(joined)+len(joined)/8)
		reply = append(reply, `{"item_name":`...)
		return append(jsonstring.Append(reply, joined), '}'), nil
	}
	name, _ := json.Marshal(joined)
	merged := map[string]json.RawMessage{}
	if withProjectExtra {
		if err := json.Unmarshal(result.ProjectExtra, &merged); err != nil {
			return nil, &queues.Error{Op: "server.itemReply", Code: queues.CodeUnavailable, Message: "project extra keys are corrupt", Err: err}
		}
	}
	if hasItemExtra {
		if err := json.Unmarshal(result.Items[0].Extras, &merged); err != nil {
			return nil, &queues.Error{Op: "server.itemReply", Code: queues.CodeUnavailable, Message: "item extra keys are corrupt", Err: err}
		}
	}
	merged["item_name"] = name
	return json.Marshal(merged)
}

type doneBody struct {
	Downloader looseString          `json:"downloader"`
	Version    looseString          `json:"version"`
	Item       *string              `json:"item"`
	Bytes      map[string]byteCount `json:"bytes"`
	ID         json.RawMessage      `json:"id"`
}

func (w *WarriorAPI) done(call *warriorCall) (warriorReply, error) {
	var req doneBody
	if err := decodeJSON(call.body, &req); err != nil {
		return warriorReply{}, err
	}
	if req.Item == nil {
		return warriorReply{}, badRequest("missing \"item\"")
	}
	byteMap := make(map[string]int64, len(req.Bytes))
	for k, v := range req.Bytes {
		byteMap[k] = int64(v)
	}
	_, err := w.Engine.Done(call.ctx, queues.DoneRequest{
		Project: call.route.Slug, Downloader: string(req.Downloader), Version: string(req.Version),
		UserAgent: call.userAgent, Items: splitItems(*req.Item), Bytes: byteMap, ID: req.ID,
	})
	if err != nil {
		return warriorReply{}, err
	}
	// Seesaw's SendDoneToTracker succeeds only on a body that strips to "OK".
	return warriorReply{contentTypeText, doneReply}, nil
}

// The warrior replies' content types and done's body, made once: every
// round trip sends them. Header values are only ever replaced, never
// changed in place, so responses can share them.
var (
	contentTypeText = []string{"text/plain; charset=utf-8"}
	contentTypeJSON = []string{"application/json"}
	// gin's c.JSON's, for the replies that were c.JSON's.
	contentTypeJSONUTF8 = []string{"application/json; charset=utf-8"}
	doneReply           = []byte("OK\n")
)

// writeReply answers 200 with body: c.Data without building a header
// value and a renderer per reply.
func writeReply(c *gin.Context, contentType []string, body []byte) {
	c.Writer.Header()["Content-Type"] = contentType
	c.Writer.WriteHeader(http.StatusOK)
	_, _ = c.Writer.Write(body)
}

// splitItems splits NUL-joined items; one trailing NUL is tolerated.
func splitItems(joined string) []string {
	return strings.Split(strings.TrimSuffix(joined, "\x00"), "\x00")
}

type uploadBody struct {
	Downloader looseString `json:"downloader"`
	ItemName   string      `json:"item_name"`
	Version    looseString `json:"version"`
}

func (w *WarriorAPI) upload(c *gin.Context, route warriorRoute) {
	var req uploadBody
	if !bindJSON(c, w.MaxBodyBytes, &req) {
		return
	}
	if err := queues.ValidateDownloader(string(req.Downloader)); err != nil {
		_ = c.Error(err)
		return
	}
	project, err := w.Engine.Project(c.Request.Context(), route.Slug)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if len(project.UploadTargets) == 0 {
		_ = c.Error(&httpError{Status: http.StatusNotFound, Code: "no_upload_target", Message: "this project has no upload target configured"})
		return
	}
	target := project.UploadTargets[rand.IntN(len(project.UploadTargets))]
	c.JSON(http.StatusOK, gin.H{"upload_target": strings.ReplaceAll(target, ":downloader", string(req.Downloader))})
}

type releaseBody struct {
	Downloader looseString `json:"downloader"`
	Item       *string     `json:"item"`
}

func (w *WarriorAPI) release(c *gin.Context, route warriorRoute) {
	var req releaseBody
	if !bindJSON(c, w.MaxBodyBytes, &req) {
		return
	}
	if req.Item == nil {
		_ = c.Error(badRequest("missing \"item\""))
		return
	}
	if err := queues.ValidateDownloader(string(req.Downloader)); err != nil {
		_ = c.Error(err)
		return
	}
	items := splitItems(*req.Item)
	if len(items) > queues.MaxMulti {
		_ = c.Error(badRequest("at most %d items per release", queues.MaxMulti))
		return
	}
	result, err := w.Engine.Release(c.Request.Context(), route.Slug, items, string(req.Downloader))
	if err != nil {
		_ = c.Error(err)
		return
	}
	if result.Released == 0 {
		_ = c.Error(&queues.Error{Op: "server.release", Code: queues.CodeNotHandedOut, Items: items,
			Message: "nothing released: the items are not out with you"})
		return
	}
	c.JSON(http.StatusOK, result)
}
