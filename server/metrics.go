package server

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/queues"
)

// routeKey is the gin context key under which a handler names its route
// for the HTTP metrics. Values are the route* constants below.
const routeKey = "hoard.route"

// Route labels of hoard_http_*: a fixed, small set. Never a raw path or a
// slug, which would let any client mint new time series.
const (
	routeRequest      = "request"
	routeMultiRequest = "multi_request"
	routeDone         = "done"
	routeUpload       = "upload"
	routeRelease      = "release"
	routeFail         = "fail"
	routeItemStatus   = "item_status"
	routeStatsJSON    = "stats_json"
	routeProjectsJSON = "projects_json"
	routeNow          = "now"
	routeHealthz      = "healthz"
	routeReadyz       = "readyz"
	routePprof        = "pprof"
	routeMetrics      = "metrics"
	routeAdmin        = "admin"
	routeOther        = "other"
	routePage         = "page"
	routeChartsJSON   = "charts_json"
	routeRecentJSON   = "recent_json"
	routeWebsocket    = "websocket"
	routeIndex        = "index"
	routeStatic       = "static"
	routeBackfeed     = "backfeed"
)

// scrapeTimeout bounds how long one /metrics scrape may spend reading
// project statistics from Redis.
const scrapeTimeout = 5 * time.Second

// latencyBuckets span 100µs to 10s.
var latencyBuckets = []float64{
	.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
}

// Metrics owns the server's private Prometheus registry.
type Metrics struct {
	registry *prometheus.Registry
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec

	// series holds each (route, status)'s two series once looked up, so a
	// request pays one map read instead of two label look-ups (hashing
	// and comparing the label values) and formatting the status. Bounded:
	// routes are a fixed set and statuses three digits.
	mu     sync.RWMutex
	series map[routeStatus]requestSeries
}

type routeStatus struct {
	route  string
	status int
}

type requestSeries struct {
	duration prometheus.Observer
	requests prometheus.Counter
}

// seriesFor returns the route and status's series, looking them up once.
func (m *Metrics) seriesFor(route string, status int) requestSeries {
	key := routeStatus{route, status}
	m.mu.RLock()
	s, ok := m.series[key]
	m.mu.RUnlock()
	if ok {
		return s
	}
	code := strconv.Itoa(status)
	s = requestSeries{duration: m.duration.WithLabelValues(route, code), requests: m.requests.WithLabelValues(route, code)}
	m.mu.Lock()
	m.series[key] = s
	m.mu.Unlock()
	return s
}

// Register adds collectors to the registry.
func (m *Metrics) Register(collectors ...prometheus.Collector) error {
	for _, c := range collectors {
		if err := m.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// NewMetrics builds a registry with the Go and process collectors, the
// HTTP request metrics and a per-project collector over stats.
func NewMetrics(stats ProjectStats, logger *slog.Logger) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hoard_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route and status code.",
			Buckets: latencyBuckets,
		}, []string{"route", "code"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_http_requests_total",
			Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
		series: map[routeStatus]requestSeries{},
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.duration,
		m.requests,
		newProjectCollector(stats, logger),
	)
	return m
}

// Middleware times every request. It must run outside renderErrors and
// gin.Recovery, so the status it records is the one the client got.
func (m *Metrics) Middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		m.observe(routeLabel(c), c.Writer.Status(), time.Since(start))
	}
}

// observe records one request served: the middleware's for gin's, the
// warrior listener's for its own.
func (m *Metrics) observe(route string, status int, took time.Duration) {
	series := m.seriesFor(route, status)
	series.duration.Observe(took.Seconds())
	series.requests.Inc()
}

// routeLabel is the route a handler named with c.Set(routeKey, …), or
// else one derived from gin's matched route pattern.
func routeLabel(c *gin.Context) string {
	if v, ok := c.Get(routeKey); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	switch p := c.FullPath(); {
	case p == "/now":
		return routeNow
	case p == "/healthz":
		return routeHealthz
	case p == "/readyz":
		return routeReadyz
	case strings.HasPrefix(p, pprofPrefix):
		return routePprof
	case p == "/projects.json":
		return routeProjectsJSON
	case p == "/metrics":
		return routeMetrics
	case p == "/":
		return routeIndex
	case p == "/backfeed/legacy/:key":
		return routeBackfeed
	case strings.HasPrefix(p, "/static/"):
		return routeStatic
	case p == "/api/v1" || strings.HasPrefix(p, "/api/v1/"):
		return routeAdmin
	}
	return routeOther
}

// warriorRouteLabel labels a parsed warrior path; a path with a multi=N
// segment is a multi_request. Labels are constants, never the path's
// bytes: the warrior listener's paths are views into a reused buffer, and
// a label is kept (seriesFor).
func warriorRouteLabel(route warriorRoute, path string) string {
	switch route.Action {
	case "request":
		if strings.Count(strings.TrimPrefix(path, "/"), "/") > 1 {
			return routeMultiRequest
		}
		return routeRequest
	case "done":
		return routeDone
	case "upload":
		return routeUpload
	case "release":
		return routeRelease
	case "fail":
		return routeFail
	}
	return routeOther
}

// Serve answers GET /metrics in the Prometheus text format. A non-empty
// token is required as "Authorization: Bearer <token>"; an empty one
// leaves /metrics open.
// Serve answers /metrics. Any of tokens (the metrics token, the admin
// token) opens it; when none is set it is open, which hoard serve warns
// about at start: project names, downloaders' activity and plugin state are
// not for everyone.
func (m *Metrics) Serve(tokens ...string) gin.HandlerFunc {
	h := promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	var accepted [][]byte
	for _, t := range tokens {
		if t != "" {
			accepted = append(accepted, []byte(t))
		}
	}
	return func(c *gin.Context) {
		if len(accepted) > 0 {
			got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
			match := 0
			for _, t := range accepted {
				match |= subtle.ConstantTimeCompare([]byte(got), t)
			}
			if !ok || match != 1 {
				c.Header("WWW-Authenticate", `Bearer realm="hoard metrics"`)
				_ = c.Error(&httpError{Status: http.StatusUnauthorized, Code: "unauthorized",
					Message: "missing or wrong token (send Authorization: Bearer <HOARD_METRICS_TOKEN or HOARD_ADMIN_TOKEN>)"})
				return
			}
		}
		h.ServeHTTP(c.Writer, c.Request)
	}
}

// ProjectStats is what the project collector needs from the engine.
type ProjectStats interface {
	Projects(ctx context.Context) ([]string, error)
	Stats(ctx context.Context, slug string) (queues.Stats, error)
}

// projectCollector reads every project's statistics at scrape time, so
// the numbers are Redis's, not a copy that can drift.
type projectCollector struct {
	stats  ProjectStats
	logger *slog.Logger

	items            *prometheus.Desc
	itemsOffloaded   *prometheus.Desc
	itemsDone        *prometheus.Desc
	bytesDone        *prometheus.Desc
	itemRequests     *prometheus.Desc
	itemsServed      *prometheus.Desc
	reclaimsServed   *prometheus.Desc
	irsr             *prometheus.Desc
	reclaimRate      *prometheus.Desc
	reclaimServeRate *prometheus.Desc
	rtt              *prometheus.Desc
	oldestClaim      *prometheus.Desc
	itemsFailed      *prometheus.Desc
	itemFailRate     *prometheus.Desc
	itemsFiltered    *prometheus.Desc
	filterRate       *prometheus.Desc
	scrapeErrors     prometheus.Counter
}

// requestResults maps the result label of hoard_project_item_requests_total
// to its counter in queues.Stats.Counters.
var requestResults = []struct{ label, counter string }{
	{"served", "requests_served"},
	{"empty", "requests_empty"},
	{"rate_limited", "requests_rate_limited"},
	{"blocked", "requests_blocked"},
	{"too_old", "requests_too_old"},
}

func newProjectCollector(stats ProjectStats, logger *slog.Logger) *projectCollector {
	project := []string{"project"}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(project, labels...), nil)
	}
	return &projectCollector{
		stats:            stats,
		logger:           logger,
		items:            desc("hoard_project_items", "Items in each place of a project (queues, out, done, failed, reclaimable).", "place"),
		itemsOffloaded:   desc("hoard_project_items_offloaded", "Waiting items of each shared queue in segment files on disk, not Redis (also in hoard_project_items).", "queue"),
		itemsDone:        desc("hoard_project_items_done_total", "Items completed."),
		bytesDone:        desc("hoard_project_bytes_done_total", "Bytes reported by completed items."),
		itemRequests:     desc("hoard_project_item_requests_total", "Item requests, by result.", "result"),
		itemsServed:      desc("hoard_project_items_served_total", "Items handed out, reclaims included."),
		reclaimsServed:   desc("hoard_project_reclaims_served_total", "Reclaimed items handed out again."),
		irsr:             desc("hoard_project_irsr", "Item request serve rate: share of item requests given an item."),
		reclaimRate:      desc("hoard_project_reclaim_rate", "Share of handed-out items reclaimed at least once."),
		reclaimServeRate: desc("hoard_project_reclaim_serve_rate", "Share of served requests given a reclaim."),
		rtt:              desc("hoard_project_rtt_seconds", "Mean time from claim to done."),
		oldestClaim:      desc("hoard_project_oldest_claim_age_seconds", "Age of the claim with the earliest reclaim deadline, the oldest claim under one TTL (0 with none); past the reclaim TTL with reclaiming off, it is work nobody will bring back."),
		itemsFailed:      desc("hoard_project_items_failed_total", "Items sent to failed (claimed max_claims times without a done, or reported failed), requeued ones included."),
		itemFailRate:     desc("hoard_project_item_fail_rate", "Share of finished items that failed: items failed over items failed plus done."),
		itemsFiltered:    desc("hoard_project_items_filtered_total", "Items the project's filters dropped on the ways in (admin add, backfeed, import)."),
		filterRate:       desc("hoard_project_filter_rate", "Share of offered items the filters dropped: items filtered over items filtered plus queued."),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_metrics_scrape_errors_total",
			Help: "Projects (or project lists) whose statistics could not be read during a scrape.",
		}),
	}
}

func (p *projectCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{p.items, p.itemsOffloaded, p.itemsDone, p.bytesDone, p.itemRequests, p.itemsServed,
		p.reclaimsServed, p.irsr, p.reclaimRate, p.reclaimServeRate, p.rtt, p.oldestClaim, p.itemsFailed, p.itemFailRate,
		p.itemsFiltered, p.filterRate} {
		ch <- d
	}
	p.scrapeErrors.Describe(ch)
}

func (p *projectCollector) Collect(ch chan<- prometheus.Metric) {
	// Emitted last, so it includes this scrape's errors.
	defer p.scrapeErrors.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	slugs, err := p.stats.Projects(ctx)
	if err != nil {
		p.scrapeErrors.Inc()
		p.logger.Warn("metrics: cannot list projects", "err", err)
		return
	}
	for _, slug := range slugs {
		s, err := p.stats.Stats(ctx, slug)
		if err != nil {
			p.scrapeErrors.Inc()
			p.logger.Warn("metrics: cannot read project stats", "project", slug, "err", err)
			continue
		}
		p.collectProject(ch, slug, s)
	}
}

func (p *projectCollector) collectProject(ch chan<- prometheus.Metric, slug string, s queues.Stats) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{slug}, labels...)...)
	}
	// A missing counter reads as 0 from the nil-safe map lookup.
	counter := func(d *prometheus.Desc, key string, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(s.Counters[key]), append([]string{slug}, labels...)...)
	}
	c := s.Counts
	for _, place := range []struct {
		name string
		n    int64
	}{
		{"todo", c.Todo}, {"todo:backfeed", c.Backfeed}, {"todo:secondary", c.Secondary}, {"todo:redo", c.Redo},
		{"todo:reserved", c.Reserved}, {"todo:scored", c.Scored}, {"out", c.Out}, {"done", c.Done}, {"failed", c.Failed}, {"reclaimable", c.Reclaimable},
	} {
		gauge(p.items, float64(place.n), place.name)
	}
	for _, q := range queues.SharedQueues {
		gauge(p.itemsOffloaded, float64(c.OffloadedIn(q)), string(q))
	}
	counter(p.itemsDone, "items_done")
	counter(p.bytesDone, "bytes_done")
	for _, r := range requestResults {
		counter(p.itemRequests, r.counter, r.label)
	}
	counter(p.itemsServed, "items_served")
	counter(p.reclaimsServed, "reclaims_served")
	gauge(p.irsr, s.IRSR)
	gauge(p.reclaimRate, s.ReclaimRate)
	gauge(p.reclaimServeRate, s.ReclaimServeRate)
	gauge(p.oldestClaim, c.OldestClaimAgeSeconds)
	gauge(p.rtt, time.Duration(s.RTT).Seconds())
	counter(p.itemsFailed, "items_failed")
	gauge(p.itemFailRate, s.ItemFailRate)
	counter(p.itemsFiltered, "items_filtered")
	gauge(p.filterRate, s.FilterRate)
}

// refusalDesc is hoard_refusals_total: errors answered, by kind.
var refusalDesc = prometheus.NewDesc("hoard_refusals_total",
	"Requests refused or failed, by kind (error code/status, e.g. unavailable/503). 5xx kinds are logged at most once a minute each; this counts every one.",
	[]string{"kind"}, nil)

// refusalCollector exposes a ratelog's counts.
type refusalCollector struct{ log *ratelog.Log }

func (r refusalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- refusalDesc }

func (r refusalCollector) Collect(ch chan<- prometheus.Metric) {
	for _, c := range r.log.Counts() {
		ch <- prometheus.MustNewConstMetric(refusalDesc, prometheus.CounterValue, float64(c.Total), c.Kind)
	}
}
