package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Plugin is the one contract every hoard plugin implements, whether it runs
// in-process (a builtin, and every unit test) or in its own process behind
// go-plugin's gRPC transport. The host calls it; a plugin never calls the
// host back. Every method gets a context whose deadline the host sets: a
// plugin should honour it, and the host stops waiting when it passes either
// way.
type Plugin interface {
	// Configure is the first call after the plugin starts, and is made
	// again after every restart. The plugin opens its Redis connections
	// and listeners here.
	Configure(ctx context.Context, cfg Config) error
	// Describe says what the plugin owns. It is called after Configure, so
	// listener addresses can be the ones actually bound.
	Describe(ctx context.Context) (Description, error)
	// OnItemDone is called for each completed item of an item type the
	// plugin owns. Delivery is at least once: the event is read from the
	// project's event log by one frontend and acknowledged when this
	// returns nil; an error, a timeout or a crash delivers it again later
	// (up to the host's EventMaxDeliveries). Hooks must be idempotent, and
	// should not be the only path that moves the plugin's state forward:
	// the log is capped, so a plugin down for longer than it covers misses
	// the oldest events (see the package doc).
	OnItemDone(ctx context.Context, ev ItemEvent) error
	// OnReclaim is called when the claim on an item the plugin owns
	// expired: its reclaim deadline passed without a done, so the queue
	// will hand it out again (when the project reclaims). Each expiry is
	// logged once, whether the queue reclaimed the item first or the
	// expiry scan found it; same delivery rules as OnItemDone.
	OnReclaim(ctx context.Context, ev ItemEvent) error
	// OnTick runs one of the plugin's scheduled jobs. Ticks of one plugin
	// never overlap. A tick should be quick: find the work, return it as
	// items to queue (TickResult.Enqueue) or queue it itself, and let
	// workers process the items.
	OnTick(ctx context.Context, tick Tick) (TickResult, error)
	// Stats returns the plugin's counters and gauges, for /metrics and the
	// leaderboard. The host polls it with the health check and serves the
	// cached copy, so a slow plugin never slows a scrape.
	Stats(ctx context.Context) (Stats, error)
	// Health returns nil when the plugin can do its job. Errors count
	// towards a restart.
	Health(ctx context.Context) error
	// HandleRequest serves one call of the plugin's own HTTP API (its
	// admin calls, and its pages' data), which the host authenticated
	// and forwards (see Request). A route the plugin does not serve
	// answers 404 (NotFoundResponse); an error is a failure of the call
	// itself, which the host answers with 502.
	HandleRequest(ctx context.Context, req Request) (Response, error)
	// Close releases what Configure opened (listeners first). The host
	// calls it before stopping or restarting the plugin; an external
	// plugin's process is killed after the grace period whatever Close
	// does.
	Close(ctx context.Context) error
}

// Factory builds a plugin. The same Factory serves a builtin (the host calls
// it in-process) and an external plugin (its main calls Serve(factory)), so
// a plugin is tested without a subprocess and shipped as one. The logger
// is the host's logger with the plugin's name in-process, and a logger
// whose records reach the host's log through go-plugin otherwise.
type Factory func(ctx context.Context, logger *slog.Logger) (Plugin, error)

// Config is what the host tells a plugin in Configure.
type Config struct {
	// Name is the name the host knows the plugin by (from its Spec).
	Name string `json:"name"`
	// RedisURL is hoard's Redis: one redis://, rediss:// or unix:// URL, or a
	// comma-separated list of cluster nodes, exactly as HOARD_REDIS_URL.
	RedisURL string `json:"redis_url"`
	// Settings is the plugin's own JSON document from hoard's
	// configuration (Spec.Settings), or nil.
	Settings json.RawMessage `json:"settings,omitempty"`
	// Host is the host's API for the plugin's own work (enqueue, claim,
	// done with a result, release, counts), or nil when the host offers
	// none. It stays valid until Close.
	Host HostAPI `json:"-"`
}

// Description is what a plugin owns.
type Description struct {
	// Version is the plugin's own version, for the logs and the status.
	Version string `json:"version"`
	// ItemTypes route item events: an item of Project whose name starts
	// with ItemPrefix belongs to the plugin.
	ItemTypes []ItemType `json:"item_types"`
	// Jobs are ticked by the host at their period.
	Jobs []Job `json:"jobs"`
	// Listeners are the sockets the plugin serves itself (announce,
	// scrape). Informational: the host logs and reports them.
	Listeners []Listener `json:"listeners"`
	// AdminScopes are the parts of the plugin's own admin API an
	// operator may give an account without making it an admin: the role
	// "plugin:<name>:<scope>" opens the routes its scope lists, and the
	// host checks them before a call reaches the plugin, and forwards the
	// caller's scopes (Request.Scopes) so the plugin checks them again.
	// Both transports carry them; an external plugin built before they
	// did declares none, so its scoped roles open nothing.
	AdminScopes []AdminScope `json:"admin_scopes,omitempty"`
	// AdminPages are the plugin's views in hoard's web admin (pages.go):
	// sections over routes of its own admin API, which the console
	// renders generically.
	AdminPages []AdminPage `json:"admin_pages,omitempty"`
}

// AdminScope is one scope of a plugin's admin API.
type AdminScope struct {
	Name string `json:"name"`
	// Help says what the scope is for, for operators choosing a role.
	Help   string       `json:"help,omitempty"`
	Routes []ScopeRoute `json:"routes"`
}

// ScopeRoute opens the routes below Prefix (a path below the plugin's
// root, such as "/torrents/") to Methods (every method when empty).
type ScopeRoute struct {
	Methods []string `json:"methods,omitempty"`
	Prefix  string   `json:"prefix"`
}

// Allows reports whether the scope opens method on path (below the
// plugin's root). A path that is not clean ("/torrents/../users") is
// never allowed, so a prefix cannot be walked out of.
func (s AdminScope) Allows(method, path string) bool {
	if path == "" || path[0] != '/' || strings.Contains(path, "//") || strings.Contains(path, "\\") {
		return false
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	for _, r := range s.Routes {
		if r.Prefix == "" || !strings.HasPrefix(path, r.Prefix) {
			continue
		}
		if len(r.Methods) == 0 || slices.Contains(r.Methods, method) {
			return true
		}
	}
	return false
}

// ItemType is a kind of work item a plugin owns, queued in a hoard project.
// Several item types may share a project when their prefixes differ.
type ItemType struct {
	Name    string `json:"name"`
	Project string `json:"project"`
	// ItemPrefix is the prefix of every item name of this type ("" = every
	// item of the project). The longest matching prefix wins.
	ItemPrefix string `json:"item_prefix"`
	// ReclaimTTL, when set, is the reclaim TTL the host gives the project
	// if it has to create it (with reclaiming on), so an item whose worker
	// died is handed out again. An existing project is left as it is.
	ReclaimTTL time.Duration `json:"reclaim_ttl"`
	// Order is how the type's items are served: OrderFIFO (the default:
	// queued in todo, first in first out) or OrderScore (the project's
	// score-ordered queue, highest score first, for work that must go in
	// priority order; such items are queued with a score).
	Order string `json:"order,omitempty"`
	// DoneMode is what becomes of the type's done items: "count" (the
	// default for a plugin's types: counted, and only the latest
	// RecentDone kept, so done items never grow Redis forever),
	// "keep" (every one in the done set) or "archive". Item types sharing
	// a project must agree; the host applies it to the project.
	DoneMode string `json:"done_mode,omitempty"`
	// RecentDone is how many recent completions count and archive keep
	// to recognise a repeated done (0 = DefaultPluginRecentDone).
	RecentDone int `json:"recent_done,omitempty"`
	// Public lets the public warrior API hand out the type's items to
	// anyone. A plugin's work is not public by default: its own workers
	// reach it through HostAPI, and an outside worker (the site's) with a
	// token the operator scoped to the plugin's item types. The project
	// of a type that is not public is left off the public project lists.
	Public bool `json:"public,omitempty"`
}

// Item type orders.
const (
	OrderFIFO  = "fifo"
	OrderScore = "score"
)

// Retention defaults for a plugin's item types.
const (
	DefaultPluginDoneMode   = "count"
	DefaultPluginRecentDone = 100_000
)

// Scored reports whether the type's items go to the score-ordered queue.
func (t ItemType) Scored() bool { return t.Order == OrderScore }

// Job is a scheduled job a plugin owns.
type Job struct {
	Name   string        `json:"name"`
	Period time.Duration `json:"period"`
}

// Listener is a socket a plugin serves itself.
type Listener struct {
	Name    string `json:"name"`
	Network string `json:"network"` // "tcp", "udp", "tcp4", ...
	Address string `json:"address"` // as bound, e.g. "[::]:6969"
}

// ItemEvent is one item that completed or whose claim expired.
type ItemEvent struct {
	// ItemType is the name of the plugin's item type the item belongs to.
	ItemType string `json:"item_type"`
	Project  string `json:"project"`
	Item     string `json:"item"`
	// Downloader completed the item (done) or held the expired claim
	// (reclaim); "" when unknown.
	Downloader string `json:"downloader"`
	// At is when the item completed, or when its claim expired.
	At time.Time `json:"at"`
	// Result is the JSON result the worker sent with its done (HostAPI
	// Done), or nil.
	Result json.RawMessage `json:"result,omitempty"`
}

// Tick is one run of a scheduled job.
type Tick struct {
	Job string `json:"job"`
	// Scheduled is when this run was due; At is when it was started.
	Scheduled time.Time `json:"scheduled"`
	At        time.Time `json:"at"`
	// Missed counts the runs skipped before this one (the plugin was down,
	// or hoard was paused): they are never replayed in a burst; this one
	// run stands for all of them. Work must therefore be computed from
	// stored timestamps, never from "one run per period" (seed 000).
	Missed int64 `json:"missed"`
}

// TickResult is what a tick hands back to the host.
type TickResult struct {
	// Enqueue are items the host queues (todo) on the plugin's behalf.
	// Each must belong to one of the plugin's item types.
	Enqueue []QueueItem `json:"enqueue"`
}

// QueueItem is one item to queue in a project.
type QueueItem struct {
	Project string `json:"project"`
	Item    string `json:"item"`
	// Score orders an item of an OrderScore type (highest first);
	// ignored for FIFO types.
	Score float64 `json:"score,omitempty"`
}

// ScoredItem is one item for a project's score-ordered queue.
type ScoredItem struct {
	Item  string  `json:"item"`
	Score float64 `json:"score"`
}

// MetricKind says how a metric adds up.
type MetricKind int

// Metric kinds.
const (
	// Counter only ever grows (until the plugin restarts).
	Counter MetricKind = iota + 1
	// Gauge is a current value.
	Gauge
)

// String names the kind.
func (k MetricKind) String() string {
	switch k {
	case Counter:
		return "counter"
	case Gauge:
		return "gauge"
	}
	return fmt.Sprintf("MetricKind(%d)", int(k))
}

// Stats are a plugin's metrics.
type Stats struct {
	Metrics []Metric `json:"metrics"`
}

// Metric is one counter or gauge. Name and label names follow Prometheus'
// rules ([a-zA-Z_][a-zA-Z0-9_]*); /metrics serves it as
// hoard_<plugin>_<name>.
type Metric struct {
	Name   string            `json:"name"`
	Help   string            `json:"help,omitempty"`
	Kind   MetricKind        `json:"kind"`
	Value  float64           `json:"value"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Limits on what a plugin may describe and return, so one misbehaving
// plugin cannot make the host allocate without bound.
const (
	MaxItemTypes    = 64
	MaxJobs         = 64
	MaxListeners    = 64
	MinJobPeriod    = time.Second
	MaxTickEnqueue  = 100000
	MaxMetrics      = 2000
	MaxMetricLabels = 8
)

var (
	pluginNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	partNamePattern   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
	metricNamePattern = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,127}$`)
	// projectPattern is the shape of a hoard project name; the host also
	// checks the names the queue engine reserves.
	projectPattern = regexp.MustCompile(`^[a-z0-9][-_a-z0-9]{0,63}$`)
)

// ValidateName checks a plugin's name: 1-32 of a-z, 0-9 and -, starting
// with a letter. It becomes part of Redis keys (inside a hash tag, so never
// a brace) and of metric names.
func ValidateName(name string) error {
	if !pluginNamePattern.MatchString(name) {
		return fmt.Errorf("plugin name %q must be 1-32 of a-z, 0-9 and -, starting with a letter", name)
	}
	return nil
}

// Validate checks a description. Item type and job names are 1-64 of a-z,
// 0-9, _ and -; projects are valid hoard slugs; periods are at least
// MinJobPeriod; names are unique.
func (d Description) Validate() error {
	var errs []error
	if len(d.ItemTypes) > MaxItemTypes || len(d.Jobs) > MaxJobs || len(d.Listeners) > MaxListeners {
		return fmt.Errorf("description lists %d item types, %d jobs and %d listeners; the limits are %d, %d and %d",
			len(d.ItemTypes), len(d.Jobs), len(d.Listeners), MaxItemTypes, MaxJobs, MaxListeners)
	}
	names := map[string]bool{}
	prefixes := map[string]string{}
	for _, t := range d.ItemTypes {
		if !partNamePattern.MatchString(t.Name) {
			errs = append(errs, fmt.Errorf("item type name %q must be 1-64 of a-z, 0-9, _ and -, starting with a letter", t.Name))
		}
		if names[t.Name] {
			errs = append(errs, fmt.Errorf("item type %q is described twice", t.Name))
		}
		names[t.Name] = true
		if !projectPattern.MatchString(t.Project) {
			errs = append(errs, fmt.Errorf("item type %q: project %q must be 1-64 of a-z, 0-9, - and _, starting with a letter or digit", t.Name, t.Project))
		}
		if strings.ContainsAny(t.ItemPrefix, "\x00\r\n") {
			errs = append(errs, fmt.Errorf("item type %q: prefix contains NUL, CR or LF", t.Name))
		}
		key := t.Project + "\x00" + t.ItemPrefix
		if other, ok := prefixes[key]; ok {
			errs = append(errs, fmt.Errorf("item types %q and %q both own prefix %q of project %q", other, t.Name, t.ItemPrefix, t.Project))
		}
		prefixes[key] = t.Name
		if t.ReclaimTTL < 0 {
			errs = append(errs, fmt.Errorf("item type %q: negative reclaim TTL", t.Name))
		}
		if t.Order != "" && t.Order != OrderFIFO && t.Order != OrderScore {
			errs = append(errs, fmt.Errorf("item type %q: order %q is not %q or %q", t.Name, t.Order, OrderFIFO, OrderScore))
		}
		switch t.DoneMode {
		case "", "keep", "count", "archive":
		default:
			errs = append(errs, fmt.Errorf("item type %q: done_mode %q is not keep, count or archive", t.Name, t.DoneMode))
		}
		if t.RecentDone != 0 && (t.RecentDone < 1000 || t.RecentDone > 100_000_000) {
			errs = append(errs, fmt.Errorf("item type %q: recent_done %d is not between 1000 and 100000000", t.Name, t.RecentDone))
		}
	}
	retention := map[string]ItemType{}
	for _, t := range d.ItemTypes {
		other, seen := retention[t.Project]
		if !seen {
			retention[t.Project] = t
			continue
		}
		if other.doneMode() != t.doneMode() || other.recentDone() != t.recentDone() {
			errs = append(errs, fmt.Errorf("item types %q and %q share project %q but not its retention (done_mode %s/%s, recent_done %d/%d)",
				other.Name, t.Name, t.Project, other.doneMode(), t.doneMode(), other.recentDone(), t.recentDone()))
		}
	}
	jobs := map[string]bool{}
	for _, j := range d.Jobs {
		if !partNamePattern.MatchString(j.Name) {
			errs = append(errs, fmt.Errorf("job name %q must be 1-64 of a-z, 0-9, _ and -, starting with a letter", j.Name))
		}
		if jobs[j.Name] {
			errs = append(errs, fmt.Errorf("job %q is described twice", j.Name))
		}
		jobs[j.Name] = true
		if j.Period < MinJobPeriod {
			errs = append(errs, fmt.Errorf("job %q: period %s is shorter than %s", j.Name, j.Period, MinJobPeriod))
		}
	}
	errs = append(errs, d.validateScopes()...)
	return errors.Join(append(errs, d.validatePages()...)...)
}

// validateScopes checks the admin scopes: names as roles take them
// ("plugin:<name>:<scope>"), each declared once, and every route a
// prefix below the plugin's root with known methods.
func (d Description) validateScopes() []error {
	var errs []error
	scopes := map[string]bool{}
	for _, s := range d.AdminScopes {
		if !scopeNamePattern.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("admin scope name %q must be 1-32 of a-z, 0-9, _ and -, starting with a letter", s.Name))
		}
		if scopes[s.Name] {
			errs = append(errs, fmt.Errorf("admin scope %q is described twice", s.Name))
		}
		scopes[s.Name] = true
		if len(s.Routes) == 0 {
			errs = append(errs, fmt.Errorf("admin scope %q opens no route", s.Name))
		}
		for _, r := range s.Routes {
			if !strings.HasPrefix(r.Prefix, "/") {
				errs = append(errs, fmt.Errorf("admin scope %q: prefix %q must start with /", s.Name, r.Prefix))
			}
			for _, m := range r.Methods {
				if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}, m) {
					errs = append(errs, fmt.Errorf("admin scope %q: method %q is not GET, HEAD, POST, PUT, PATCH or DELETE", s.Name, m))
				}
			}
		}
	}
	return errs
}

var scopeNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// Owner finds the item type an item belongs to: same project, longest
// matching prefix.
func (d Description) Owner(project, item string) (ItemType, bool) {
	var best ItemType
	found := false
	for _, t := range d.ItemTypes {
		if t.Project != project || !strings.HasPrefix(item, t.ItemPrefix) {
			continue
		}
		if !found || len(t.ItemPrefix) > len(best.ItemPrefix) {
			best, found = t, true
		}
	}
	return best, found
}

// OwnsProject reports whether any item type lives in project.
func (d Description) OwnsProject(project string) bool {
	for _, t := range d.ItemTypes {
		if t.Project == project {
			return true
		}
	}
	return false
}

func (t ItemType) doneMode() string {
	if t.DoneMode == "" {
		return DefaultPluginDoneMode
	}
	return t.DoneMode
}

func (t ItemType) recentDone() int {
	if t.RecentDone == 0 {
		return DefaultPluginRecentDone
	}
	return t.RecentDone
}

// ProjectSpec is what the host asks of a project its plugin's item types
// live in.
type ProjectSpec struct {
	// ReclaimTTL > 0 turns reclaiming on with that TTL when the project is
	// created (an existing project keeps its operators' choice).
	ReclaimTTL time.Duration
	// DoneMode and RecentDone are the item types' retention, applied to
	// the project whether new or not: the plugin owns its items' fate.
	DoneMode   string
	RecentDone int
}

// ProjectSpec gathers what the item types living in project ask of it:
// the shortest reclaim TTL, and their (common) retention.
func (d Description) ProjectSpec(project string) ProjectSpec {
	var spec ProjectSpec
	for _, t := range d.ItemTypes {
		if t.Project != project {
			continue
		}
		if t.ReclaimTTL > 0 && (spec.ReclaimTTL == 0 || t.ReclaimTTL < spec.ReclaimTTL) {
			spec.ReclaimTTL = t.ReclaimTTL
		}
		spec.DoneMode, spec.RecentDone = t.doneMode(), t.recentDone()
	}
	return spec
}

// Projects lists the distinct projects of the item types, in order.
func (d Description) Projects() []string {
	var out []string
	for _, t := range d.ItemTypes {
		if !slices.Contains(out, t.Project) {
			out = append(out, t.Project)
		}
	}
	return out
}

// ValidMetricName reports whether name is a valid metric or label name.
func ValidMetricName(name string) bool { return metricNamePattern.MatchString(name) }
