package btadmin

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins"

	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
)

// TrackerViews serves GET /tracker/bittorrent.json, the tracker page's
// public views of seed 002: unique users per month and per country (the
// unique-IP metrics) and, when the operator makes them public, the
// torrents with the highest scores. Info-hashes are private on a private
// tracker, so TopTorrents is 0 unless the operator says otherwise
// (`hoard serve --public-top-torrents N`). Anyone may call it, so one
// read serves every caller for CacheFor.
type TrackerViews struct {
	Scorer      *scoring.Scorer  // nil: no scores
	Metrics     *ipmetrics.Store // nil: no unique-IP metrics
	TopTorrents int              // torrents by score shown; 0 = none
	// Months of users per month, and countries listed; zero takes 12
	// and 50.
	Months, Countries int
	CacheFor          time.Duration // zero is 10 s
	Now               func() time.Time

	mu     sync.Mutex
	cached []byte
	at     time.Time
}

// TrackerViewsReply is GET /tracker/bittorrent.json's body.
type TrackerViewsReply struct {
	// Users is the unique users of all time (each IP once per 30 days).
	Users        int64                  `json:"users"`
	UsersByMonth []ipmetrics.MonthCount `json:"users_by_month"`
	Countries    []ipmetrics.PlaceCount `json:"countries"`
	// TopTorrents is empty unless the operator made them public.
	TopTorrents []scoring.Ranked `json:"top_torrents"`
	// TopShown says whether top torrents are public on this tracker.
	TopShown bool `json:"top_torrents_shown"`
}

// register adds the page data to r, the root of the plugin's public
// API (plugins.PagePath, which the host serves as
// /tracker/bittorrent.json).
func (v *TrackerViews) register(r gin.IRoutes) {
	r.GET(plugins.PagePath, v.serve)
}

func (v *TrackerViews) serve(c *gin.Context) {
	body, err := v.read(c.Request.Context())
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Cache-Control", "max-age=10")
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

// read returns the cached reply, or reads it afresh once CacheFor passed;
// callers arriving meanwhile wait for that one read.
func (v *TrackerViews) read(ctx context.Context) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	cacheFor := v.CacheFor
	if cacheFor <= 0 {
		cacheFor = 10 * time.Second
	}
	if v.cached != nil && now().Sub(v.at) < cacheFor {
		return v.cached, nil
	}
	reply := TrackerViewsReply{UsersByMonth: []ipmetrics.MonthCount{}, Countries: []ipmetrics.PlaceCount{},
		TopTorrents: []scoring.Ranked{}, TopShown: v.TopTorrents > 0 && v.Scorer != nil}
	if v.Metrics != nil {
		months, countries := v.Months, v.Countries
		if months <= 0 {
			months = 12
		}
		if countries <= 0 {
			countries = 50
		}
		report, err := v.Metrics.Report(ctx, nil, "", countries)
		if err != nil {
			return nil, err
		}
		reply.Users, reply.Countries = report.Users, report.Countries
		if reply.UsersByMonth, err = v.Metrics.UsersByMonth(ctx, nil, ipmetrics.LastMonths(v.Metrics.Now(), months)); err != nil {
			return nil, err
		}
	}
	if reply.TopShown {
		top, err := v.Scorer.Top(ctx, min(v.TopTorrents, scoring.MaxTop))
		if err != nil {
			return nil, err
		}
		reply.TopTorrents = top
	}
	body, err := json.Marshal(reply)
	if err != nil {
		return nil, err
	}
	v.cached, v.at = body, now()
	return body, nil
}
