package server

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/queues"
)

// itemStatusPath reports whether path is /<slug>/items/<item>.json, with
// the slug and the item (which may itself hold "/"; the path is already
// percent-decoded). Neither is validated here.
func itemStatusPath(path string) (slug, item string, ok bool) {
	rest := strings.TrimPrefix(path, "/")
	slug, rest, found := strings.Cut(rest, "/items/")
	if !found || slug == "" || strings.Contains(slug, "/") {
		return "", "", false
	}
	item, ok = strings.CutSuffix(rest, ".json")
	return slug, item, ok
}

// itemStatus serves GET /<slug>/items/<item>.json: where the item is
// (todo, out with its claimant's nickname, done, failed, offloaded or
// unknown), public like stats.json, as universal-tracker had it. An
// unknown project is 404, a malformed item name 400.
func (w *WarriorAPI) itemStatus(c *gin.Context, slug, item string) {
	if c.Request.Method != http.MethodGet && c.Request.Method != http.MethodHead {
		c.Header("Allow", "GET, HEAD")
		_ = c.Error(&httpError{Status: http.StatusMethodNotAllowed, Code: "method", Message: "the item status is a GET"})
		return
	}
	status, err := w.Engine.ItemStatus(c.Request.Context(), slug, item)
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, status)
}

type failBody struct {
	Downloader looseString `json:"downloader"`
	Item       *string     `json:"item"`
	Reason     string      `json:"reason"`
}

// fail serves POST /<slug>/fail {"downloader", "item", "reason"}: the
// item's claimant says it cannot do it (items may be NUL-joined, as in a
// done). Anyone else is refused with 409 and nothing changes.
func (w *WarriorAPI) fail(call *warriorCall) (warriorReply, error) {
	var req failBody
	if err := decodeJSON(call.body, &req); err != nil {
		return warriorReply{}, err
	}
	if req.Item == nil {
		return warriorReply{}, badRequest("missing \"item\"")
	}
	result, err := w.Engine.ReportFailure(call.ctx, queues.FailRequest{
		Project: call.route.Slug, Downloader: string(req.Downloader), Items: splitItems(*req.Item), Reason: req.Reason,
	})
	if err != nil {
		return warriorReply{}, err
	}
	// c.JSON's bytes: json.Marshal's.
	body, err := json.Marshal(result)
	if err != nil {
		return warriorReply{}, err
	}
	return warriorReply{contentTypeJSONUTF8, body}, nil
}
