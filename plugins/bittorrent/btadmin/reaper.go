package btadmin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// The unseeded reaper's admin calls (Admin.Reaper; 503 when it is off):
//
//	POST /api/v1/bittorrent/reaper/extend   {"info_hash":"…","days":N} or {"user":"U","days":N}
//	GET  /api/v1/bittorrent/reaper/preview  what the next run would do, changing nothing
//	GET  /api/v1/bittorrent/reaper/counts   torrents per state (last run) and steps done
//	GET  /api/v1/bittorrent/reaper/torrents/:infohash   a torrent's reaper state and claims

func (b *Admin) registerReaper(bt *gin.RouterGroup) {
	r := bt.Group("/reaper", requirePart(func() bool { return b.Reaper != nil }, "reaper_off",
		`the unseeded reaper is off: it needs --plugin bittorrent with --plugin-settings 'bittorrent={"mode":"private","reaper":{"enabled":true}}'`))
	r.POST("/extend", b.reaperExtend)
	r.GET("/preview", b.reaperPreview)
	r.GET("/counts", b.reaperCounts)
	r.GET("/torrents/:infohash", b.reaperTorrent)
}

// reaperError turns the reaper's errors into 400, 404 and 409 replies.
func reaperError(err error) error {
	message := strings.TrimPrefix(err.Error(), "reaper: ")
	for _, sentinel := range []error{reaper.ErrInvalid, reaper.ErrNotFound, reaper.ErrNoNotice, swarm.ErrInvalid} {
		message = strings.TrimSuffix(message, ": "+sentinel.Error())
	}
	switch {
	case errors.Is(err, reaper.ErrInvalid), errors.Is(err, swarm.ErrInvalid):
		return badRequest("%s", message)
	case errors.Is(err, reaper.ErrNotFound):
		return newAPIError(http.StatusNotFound, "not_found", message)
	case errors.Is(err, reaper.ErrNoNotice):
		return newAPIError(http.StatusConflict, "no_notice", message)
	}
	return err
}

// ExtendRequest is the body of POST …/reaper/extend: one torrent
// (info_hash) or every upload of a user in the reaper's process (user),
// and the days (a whole number from 1 to 3650).
type ExtendRequest struct {
	InfoHash string          `json:"info_hash"`
	User     string          `json:"user"`
	Days     json.RawMessage `json:"days"`
}

// Extended is one torrent an extension moved.
type Extended struct {
	InfoHash     string    `json:"info_hash"`
	Notify       string    `json:"notify"`
	UnseededDate time.Time `json:"unseeded_date"`
}

// ExtendReply answers POST …/reaper/extend.
type ExtendReply struct {
	Days     int        `json:"days"`
	Extended []Extended `json:"extended"`
}

func (b *Admin) reaperExtend(c *gin.Context) {
	var req ExtendRequest
	if !decode(c, &req) {
		return
	}
	days, err := strconv.Atoi(string(req.Days))
	if err != nil || days < 1 || days > reaper.MaxExtensionDays {
		_ = c.Error(badRequest("days %s: want a whole number from 1 to %d", string(req.Days), reaper.MaxExtensionDays))
		return
	}
	if (req.InfoHash == "") == (req.User == "") {
		_ = c.Error(badRequest(`name one torrent or one user: {"info_hash": "<40 hex>", "days": 7} or {"user": "7", "days": 7}`))
		return
	}
	ctx := c.Request.Context()
	var exts []reaper.Extension
	if req.InfoHash != "" {
		hash, err := swarm.ParseInfoHash(req.InfoHash)
		if err != nil {
			_ = c.Error(swarmError(err))
			return
		}
		ext, err := b.Reaper.Extend(ctx, hash, days)
		if err != nil {
			_ = c.Error(reaperError(err))
			return
		}
		exts = append(exts, ext)
	} else if exts, err = b.Reaper.ExtendUser(ctx, req.User, days); err != nil {
		_ = c.Error(reaperError(err))
		return
	}
	reply := ExtendReply{Days: days, Extended: make([]Extended, 0, len(exts))}
	hashes := make([]string, 0, len(exts))
	for _, e := range exts {
		reply.Extended = append(reply.Extended, Extended{InfoHash: hexHash(e.InfoHash), Notify: e.Notify, UnseededDate: e.UnseededDate})
		hashes = append(hashes, hexHash(e.InfoHash))
	}
	logged := []any{"days", days, "info_hashes", hashes}
	if req.User != "" {
		logged = append(logged, "user", req.User)
	}
	logChange(c, "reaper grace extended", logged...)
	c.JSON(http.StatusOK, reply)
}

func (b *Admin) reaperPreview(c *gin.Context) {
	p, err := b.Reaper.Preview(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, p)
}

func (b *Admin) reaperCounts(c *gin.Context) {
	counts, err := b.Reaper.Counts(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, counts)
}

// ReaperTorrent is a torrent's reaper state and claims.
type ReaperTorrent struct {
	InfoHash     string         `json:"info_hash"`
	State        string         `json:"state,omitempty"`
	Notify       string         `json:"notify,omitempty"`
	UnseededDate *time.Time     `json:"unseeded_date,omitempty"`
	ClaimUntil   *time.Time     `json:"claim_until,omitempty"`
	Pending      string         `json:"pending,omitempty"`
	Claims       []reaper.Claim `json:"claims"`
	Invited      []string       `json:"invited"`
}

func (b *Admin) reaperTorrent(c *gin.Context) {
	hash, err := swarm.ParseInfoHash(c.Param("infohash"))
	if err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	ctx := c.Request.Context()
	if _, err := b.Store.Torrent(ctx, hash); err != nil {
		_ = c.Error(swarmError(err))
		return
	}
	s, err := b.Reaper.State(ctx, hash)
	if err != nil {
		_ = c.Error(err)
		return
	}
	claims, invited, err := b.Reaper.Claims(ctx, hash)
	if err != nil {
		_ = c.Error(err)
		return
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	if claims == nil {
		claims = []reaper.Claim{}
	}
	if invited == nil {
		invited = []string{}
	}
	c.JSON(http.StatusOK, ReaperTorrent{InfoHash: hexHash(hash), State: s.State, Notify: s.Notify, UnseededDate: at(s.UnseededDate),
		ClaimUntil: at(s.ClaimUntil), Pending: s.Pending, Claims: claims, Invited: invited})
}
