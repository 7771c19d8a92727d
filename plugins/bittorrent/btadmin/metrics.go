package btadmin

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// MetricsAdmin serves the unique-IP metrics (seed 002) read-only:
//
//	GET /api/v1/bittorrent/metrics?month=YYYY-MM&top=20&months=12&torrent=<infohash>
//
// month picks one calendar month (UTC; absent: all time); top bounds the
// countries, cities and postcodes listed (1-1000, default 20); months is
// how many months of users per month, up to the current one (1-120,
// default 12); torrent narrows everything to one torrent. The reply is an
// ipmetrics.Report. It is an admin extension of its own, beside Admin, so
// it needs no swarm store. A nil Store answers 503.
type MetricsAdmin struct {
	Store *ipmetrics.Store
}

// Defaults and bounds of GET …/metrics.
const (
	DefaultMetricsTop    = 20
	MaxMetricsTop        = 1000
	DefaultMetricsMonths = 12
	MaxMetricsMonths     = 120
)

// register adds GET /metrics to g, the root of the plugin's API.
func (m *MetricsAdmin) register(g *gin.RouterGroup) {
	g.GET("/metrics", m.metrics)
}

func (m *MetricsAdmin) metrics(c *gin.Context) {
	if m.Store == nil {
		_ = c.Error(newAPIError(http.StatusServiceUnavailable, "bittorrent_off", "this hoard has no unique-IP metrics store (btadmin.MetricsAdmin.Store is not set)"))
		return
	}
	number := func(name string, def, most int) (int, bool) {
		text, ok := c.GetQuery(name)
		if !ok {
			return def, true
		}
		n, err := strconv.Atoi(text)
		if err != nil || n < 1 || n > most {
			_ = c.Error(badRequest("%s=%q: want a whole number from 1 to %d", name, text, most))
			return 0, false
		}
		return n, true
	}
	top, ok := number("top", DefaultMetricsTop, MaxMetricsTop)
	if !ok {
		return
	}
	months, ok := number("months", DefaultMetricsMonths, MaxMetricsMonths)
	if !ok {
		return
	}
	var hash *bittorrent.InfoHash
	if text := c.Query("torrent"); text != "" {
		raw, err := hex.DecodeString(text)
		if err != nil || len(raw) != len(bittorrent.InfoHash{}) {
			_ = c.Error(badRequest("torrent=%q: want 40 hex characters", text))
			return
		}
		hash = (*bittorrent.InfoHash)(raw)
	}
	month := c.Query("month")
	report, err := m.Store.Report(c.Request.Context(), hash, month, top)
	if err != nil {
		if errors.Is(err, ipmetrics.ErrInvalid) {
			_ = c.Error(badRequest("month=%q: want YYYY-MM", month))
			return
		}
		_ = c.Error(err)
		return
	}
	if report.Months, err = m.Store.UsersByMonth(c.Request.Context(), hash, ipmetrics.LastMonths(m.Store.Now(), months)); err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, report)
}
