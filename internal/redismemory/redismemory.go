// Package redismemory watches how close Redis is to its memory limit, so
// an operator hears of it well before Redis refuses writes: it reads INFO
// memory from every master on an interval, exports the figures on hoard's
// /metrics, and logs an alarm at most once per interval while a node is
// over the threshold. It works the same for the redis-server hoard
// supervises and for an external Redis or Cluster; a node without a
// maxmemory is reported as having no limit.
package redismemory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultThreshold = 0.8
	DefaultInterval  = 15 * time.Second
	DefaultLogEvery  = 5 * time.Minute
)

// Config configures a Monitor. Zero values take the defaults.
type Config struct {
	Client redis.UniversalClient
	// Threshold is the share of maxmemory at which the alarm goes off (0.8).
	Threshold float64
	// Interval is how often Run reads INFO memory (15s).
	Interval time.Duration
	// LogEvery bounds the log: an alarm or a read failure at most once
	// per LogEvery per node (5m), however many checks run. That a node
	// has no limit is logged once.
	LogEvery time.Duration
	Logger   *slog.Logger
	// Now is the clock of the log bound (time.Now).
	Now func() time.Time
}

// Node is one master's memory at the last check.
type Node struct {
	Addr string
	Used int64 // used_memory, bytes
	Max  int64 // maxmemory, bytes; 0: no limit
	// Ratio is Used/Max, 0 when there is no limit.
	Ratio float64
	Alarm bool // Ratio >= Threshold
}

// Monitor reads and reports Redis memory. It is a prometheus.Collector of
// the figures of its last check.
type Monitor struct {
	cfg Config

	usedDesc, maxDesc, ratioDesc, alarmDesc *prometheus.Desc
	checkErrors                             prometheus.Counter

	mu     sync.Mutex
	nodes  []Node
	logged map[string]time.Time // kind + node -> when last logged
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Monitor, error) {
	if cfg.Client == nil {
		return nil, errors.New("redismemory: nil Redis client")
	}
	if cfg.Threshold < 0 || cfg.Threshold > 1 {
		return nil, fmt.Errorf("redismemory: threshold %v must be a share of maxmemory between 0 and 1", cfg.Threshold)
	}
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = DefaultLogEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	node := []string{"node"}
	return &Monitor{
		cfg:       cfg,
		usedDesc:  prometheus.NewDesc("hoard_redis_memory_used_bytes", "Redis used_memory at the last check, per master.", node, nil),
		maxDesc:   prometheus.NewDesc("hoard_redis_memory_max_bytes", "Redis maxmemory, per master; 0 means no limit is set, and Redis grows until the machine runs out.", node, nil),
		ratioDesc: prometheus.NewDesc("hoard_redis_memory_ratio", "used_memory / maxmemory at the last check, per master (0 with no limit).", node, nil),
		alarmDesc: prometheus.NewDesc("hoard_redis_memory_alarm", "1 while a master's used_memory is at or over the alarm threshold of its maxmemory.", node, nil),
		checkErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_redis_memory_check_errors_total", Help: "Checks of Redis memory that failed to read INFO memory.",
		}),
		logged: map[string]time.Time{},
	}, nil
}

// Config returns the configuration with defaults filled in.
func (m *Monitor) Config() Config { return m.cfg }

// Run checks every Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	ticker := time.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	for {
		_, _ = m.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Check reads INFO memory from every master, keeps the figures for
// /metrics and logs what is due. It returns the nodes read.
func (m *Monitor) Check(ctx context.Context) ([]Node, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		nodes []Node
	)
	read := func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		n, err := parseMemory(addr, info)
		if err != nil {
			return err
		}
		if n.Max > 0 {
			n.Ratio = float64(n.Used) / float64(n.Max)
			n.Alarm = n.Ratio >= m.cfg.Threshold
		}
		mu.Lock()
		nodes = append(nodes, n)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := m.cfg.Client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		err = fmt.Errorf("redismemory: unsupported client %T", c)
	}
	if err != nil && parent.Err() != nil {
		return nil, err // stopping: not a failure to report
	}
	if err != nil {
		m.checkErrors.Inc()
		if m.due("error", "") {
			m.cfg.Logger.Warn("cannot read Redis memory (INFO memory); the memory alarm is blind until it can",
				"error", err, "next_log_in", m.cfg.LogEvery)
		}
	}
	for _, n := range nodes {
		switch {
		case n.Max == 0:
			// A setting, not a condition that grows: said once per node.
			if m.once("nolimit", n.Addr) {
				m.cfg.Logger.Warn("the Redis has no memory limit (maxmemory 0): it grows until the machine runs out, and hoard cannot warn before; set maxmemory (for the supervised one, hoard serve --redis-maxmemory)",
					"redis", n.Addr, "used_bytes", n.Used)
			}
		case n.Alarm:
			if m.due("alarm", n.Addr) {
				m.cfg.Logger.Error("Redis memory is near its limit: when it is reached, writes fail (announces, dones); raise maxmemory or shed load",
					"redis", n.Addr, "used_bytes", n.Used, "max_bytes", n.Max,
					"used_percent", strconv.FormatFloat(100*n.Ratio, 'f', 1, 64),
					"threshold_percent", strconv.FormatFloat(100*m.cfg.Threshold, 'f', 0, 64),
					"next_log_in", m.cfg.LogEvery)
			}
		}
	}
	m.mu.Lock()
	if len(nodes) > 0 || err == nil {
		m.nodes = nodes
	}
	m.mu.Unlock()
	return nodes, err
}

// once says whether a line of this kind about this node was never logged,
// and records that it is now.
func (m *Monitor) once(kind, node string) bool {
	key := kind + " " + node
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.logged[key]; ok {
		return false
	}
	m.logged[key] = m.cfg.Now()
	return true
}

// due says whether a line of this kind about this node may be logged now,
// and if so records that it was.
func (m *Monitor) due(kind, node string) bool {
	now := m.cfg.Now()
	key := kind + " " + node
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.logged[key]
	if ok && now.Sub(last) < m.cfg.LogEvery && !now.Before(last) {
		return false
	}
	m.logged[key] = now
	return true
}

// parseMemory reads used_memory and maxmemory from INFO memory's text.
func parseMemory(addr, info string) (Node, error) {
	n := Node{Addr: addr}
	var haveUsed, haveMax bool
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_memory":
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return n, fmt.Errorf("%s: used_memory %q: %w", addr, value, err)
			}
			n.Used, haveUsed = v, true
		case "maxmemory":
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				return n, fmt.Errorf("%s: maxmemory %q: %w", addr, value, err)
			}
			n.Max, haveMax = v, true
		}
	}
	if !haveUsed || !haveMax {
		return n, fmt.Errorf("%s: INFO memory has no used_memory or maxmemory", addr)
	}
	return n, nil
}

// Describe implements prometheus.Collector.
func (m *Monitor) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.usedDesc
	ch <- m.maxDesc
	ch <- m.ratioDesc
	ch <- m.alarmDesc
	m.checkErrors.Describe(ch)
}

// Collect implements prometheus.Collector: the last check's figures.
func (m *Monitor) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	nodes := m.nodes
	m.mu.Unlock()
	for _, n := range nodes {
		alarm := 0.0
		if n.Alarm {
			alarm = 1
		}
		ch <- prometheus.MustNewConstMetric(m.usedDesc, prometheus.GaugeValue, float64(n.Used), n.Addr)
		ch <- prometheus.MustNewConstMetric(m.maxDesc, prometheus.GaugeValue, float64(n.Max), n.Addr)
		ch <- prometheus.MustNewConstMetric(m.ratioDesc, prometheus.GaugeValue, n.Ratio, n.Addr)
		ch <- prometheus.MustNewConstMetric(m.alarmDesc, prometheus.GaugeValue, alarm, n.Addr)
	}
	m.checkErrors.Collect(ch)
}
