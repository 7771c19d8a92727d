// Package exampleplugin is a tiny real hoard plugin for the host's tests: it
// owns one item type, one job and one HTTP listener, counts what the host
// sends it, and misbehaves on request (hangs, panics, turns unhealthy) so
// the host's supervision can be tested over both transports.
//
// Items of its project with these names trigger the misbehaviour when
// reported done:
//
//	echo:hang   OnItemDone blocks, ignoring its context, until Close
//	echo:panic  OnItemDone panics (an external plugin's process dies)
//	echo:sick   Health fails from then on
//
// With the setting "worker": true it also works its own items through the
// host's API (Config.Host), as a plugin with real item types does: it
// claims items of its project, reports each done with the result
// {"length": <bytes in the name>}, and OnItemDone shows the result it
// got back in the last_result gauge.
package exampleplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins"
)

// Settings is the plugin's settings document.
type Settings struct {
	// Project is the hoard project its items live in ("example").
	Project string `json:"project"`
	// TickPeriod is the period of its "heartbeat" job ("1m").
	TickPeriod string `json:"tick_period"`
	// Listen, when set, serves GET /stats over HTTP there.
	Listen string `json:"listen"`
	// Worker makes the plugin work its own items through Config.Host.
	Worker bool `json:"worker"`
	// Record counts every OnItemDone in Redis (HINCRBY RecordKey item 1),
	// so a test of several frontends can count deliveries across
	// processes.
	Record bool `json:"record"`
	// KeyPrefix is where its own API keeps its notes
	// (KeyPrefix+"notes", a hash): a plugin whose storage layout hoard
	// knows nothing of, for the test that the host serves such a
	// plugin's API and pages without writing any of its keys.
	KeyPrefix string `json:"key_prefix"`
	// Public declares its item type public: the warrior API hands its
	// items to anyone.
	Public bool `json:"public"`
}

// DefaultKeyPrefix is KeyPrefix's default.
const DefaultKeyPrefix = "example:"

// RecordKey is the hash Record counts deliveries in.
const RecordKey = "hoard:example-record"

// WorkerName is the worker name the plugin claims its items as.
const WorkerName = "example-worker"

// Item names that make the plugin misbehave.
const (
	HangItem  = "echo:hang"
	PanicItem = "echo:panic"
	SickItem  = "echo:sick"
)

// Example is the plugin.
type Example struct {
	logger *slog.Logger

	mu        sync.Mutex
	settings  Settings
	period    time.Duration
	name      string
	listener  net.Listener
	server    *http.Server
	done      float64
	reclaims  float64
	ticks     float64
	missed    float64
	lastDone  string
	recorder  redis.UniversalClient
	redisURL  string
	notes     redis.UniversalClient
	lastRes   string
	worked    float64
	refused   float64
	working   bool
	sick      bool
	release   chan struct{}
	closeOnce *sync.Once
}

var _ plugins.Plugin = (*Example)(nil)

// New is the plugin's Factory.
func New(_ context.Context, logger *slog.Logger) (plugins.Plugin, error) {
	return &Example{logger: logger, release: make(chan struct{}), closeOnce: &sync.Once{}}, nil
}

// defaultSettings are the settings an absent key takes.
func defaultSettings() Settings {
	return Settings{Project: "example", TickPeriod: "1m", KeyPrefix: DefaultKeyPrefix}
}

// SettingsSchema describes the settings document, its defaults read from
// defaultSettings.
func (e *Example) SettingsSchema(context.Context) (plugins.SettingsSchema, error) {
	d := defaultSettings()
	key := func(name string, def any, help string) plugins.SettingKey {
		raw, err := json.Marshal(def)
		if err != nil {
			panic(err) // plain values
		}
		return plugins.SettingKey{Key: name, Default: raw, Help: help}
	}
	return plugins.SettingsSchema{Keys: []plugins.SettingKey{
		key("project", d.Project, "the hoard project its items live in"),
		key("tick_period", d.TickPeriod, "the period of its heartbeat job"),
		key("listen", d.Listen, "serve GET /stats over HTTP there; empty: no listener"),
		key("worker", d.Worker, "work its own items through the host's API"),
		key("record", d.Record, "count every done event in Redis"),
		key("key_prefix", d.KeyPrefix, "where its own API keeps its notes"),
		key("public", d.Public, "its item type is public: the warrior API hands its items to anyone"),
	}}, nil
}

// Configure reads the settings and opens the listener.
func (e *Example) Configure(ctx context.Context, cfg plugins.Config) error {
	s := defaultSettings()
	if len(cfg.Settings) > 0 {
		if err := json.Unmarshal(cfg.Settings, &s); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
	}
	period, err := time.ParseDuration(s.TickPeriod)
	if err != nil {
		return fmt.Errorf("settings: tick_period: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settings, e.period, e.name, e.redisURL = s, period, cfg.Name, cfg.RedisURL
	if s.Listen != "" && e.listener == nil {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", s.Listen)
		if err != nil {
			return err
		}
		e.listener = ln
		server := &http.Server{Handler: http.HandlerFunc(e.serveStats), ReadHeaderTimeout: 5 * time.Second}
		e.server = server
		// The goroutine keeps its own copy: Close clears e.server.
		go func() { _ = server.Serve(ln) }()
	}
	if s.Record && e.recorder == nil {
		rdb, err := redisurl.Dial(cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("settings: record: %w", err)
		}
		e.recorder = rdb
	}
	if s.Worker && !e.working {
		if cfg.Host == nil {
			return fmt.Errorf("settings: worker needs the host API: %w", plugins.ErrNoHostAPI)
		}
		e.working = true
		go e.work(cfg.Host, s.Project, e.release)
	}
	e.logger.Info("example plugin configured", "name", cfg.Name, "project", s.Project, "pid", os.Getpid())
	return nil
}

// work claims the plugin's items through the host and reports them done
// with a result, until Close. It first checks that the host refuses a
// project the plugin does not own.
func (e *Example) work(host plugins.HostAPI, project string, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	if _, err := host.Claim(ctx, "not-"+project, WorkerName, 1); errors.Is(err, plugins.ErrNotOwned) {
		e.mu.Lock()
		e.refused++
		e.mu.Unlock()
	}
	for {
		items, err := host.Claim(ctx, project, WorkerName, 10)
		if err != nil && ctx.Err() == nil {
			e.logger.Warn("claim through the host API failed", "err", err)
		}
		for _, item := range items {
			result, _ := json.Marshal(map[string]int{"length": len(item)})
			if _, err := host.Done(ctx, project, WorkerName, []string{item}, result); err != nil {
				e.logger.Warn("done through the host API failed", "item", item, "err", err)
				continue
			}
			e.mu.Lock()
			e.worked++
			e.mu.Unlock()
		}
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (e *Example) serveStats(w http.ResponseWriter, r *http.Request) {
	stats, _ := e.Stats(r.Context())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(stats)
}

// Describe lists the item type, the job and the listener.
func (e *Example) Describe(context.Context) (plugins.Description, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := plugins.Description{
		Version: "1.0.0",
		ItemTypes: []plugins.ItemType{{Name: "echo", Project: e.settings.Project, ItemPrefix: "echo:", ReclaimTTL: time.Minute,
			Public: e.settings.Public}},
		Jobs:        []plugins.Job{{Name: "heartbeat", Period: e.period}},
		AdminScopes: Scopes,
		AdminPages:  Pages,
	}
	if e.listener != nil {
		d.Listeners = []plugins.Listener{{Name: "stats", Network: "tcp", Address: e.listener.Addr().String()}}
	}
	return d, nil
}

// OnItemDone counts the item, or misbehaves as asked.
func (e *Example) OnItemDone(ctx context.Context, ev plugins.ItemEvent) error {
	switch ev.Item {
	case HangItem:
		<-e.release // deliberately deaf to the context
		return errors.New("released by Close")
	case PanicItem:
		panic("example plugin asked to panic")
	case SickItem:
		e.mu.Lock()
		e.sick = true
		e.mu.Unlock()
	}
	e.mu.Lock()
	recorder := e.recorder
	e.mu.Unlock()
	if recorder != nil {
		if err := recorder.HIncrBy(ctx, RecordKey, ev.Item, 1).Err(); err != nil {
			return err
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.done++
	e.lastDone = ev.Item
	if len(ev.Result) > 0 {
		e.lastRes = ev.Item + " " + string(ev.Result)
	}
	return nil
}

// OnReclaim counts the reclaim.
func (e *Example) OnReclaim(context.Context, plugins.ItemEvent) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reclaims++
	return nil
}

// OnTick counts the tick and asks for one item named after it.
func (e *Example) OnTick(_ context.Context, tick plugins.Tick) (plugins.TickResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ticks++
	e.missed += float64(tick.Missed)
	return plugins.TickResult{Enqueue: []plugins.QueueItem{
		{Project: e.settings.Project, Item: fmt.Sprintf("echo:tick-%d", tick.Scheduled.UnixMilli())},
	}}, nil
}

// Stats reports the counters.
func (e *Example) Stats(context.Context) (plugins.Stats, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return plugins.Stats{Metrics: []plugins.Metric{
		{Name: "items_done_total", Help: "Items reported done.", Kind: plugins.Counter, Value: e.done},
		{Name: "reclaims_total", Help: "Claims that expired.", Kind: plugins.Counter, Value: e.reclaims},
		{Name: "ticks_total", Help: "Heartbeat runs.", Kind: plugins.Counter, Value: e.ticks},
		{Name: "ticks_missed_total", Help: "Heartbeat runs missed.", Kind: plugins.Counter, Value: e.missed},
		{Name: "last_done", Help: "1 for the last item done.", Kind: plugins.Gauge, Value: 1, Labels: map[string]string{"item": e.lastDone}},
		{Name: "pid", Help: "The plugin's process id.", Kind: plugins.Gauge, Value: float64(os.Getpid())},
		{Name: "last_result", Help: "1 for the last item done with a result, and that result.", Kind: plugins.Gauge, Value: 1,
			Labels: map[string]string{"result": e.lastRes}},
		{Name: "worked_total", Help: "Items the plugin's worker completed through the host API.", Kind: plugins.Counter, Value: e.worked},
		{Name: "host_refused_total", Help: "Host API calls on a project the plugin does not own, refused as they must be.", Kind: plugins.Counter, Value: e.refused},
	}}, nil
}

// Health fails once a SickItem was done.
func (e *Example) Health(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sick {
		return errors.New("example plugin was told it is sick")
	}
	return nil
}

// Close stops the listener and releases a hung hook.
func (e *Example) Close(ctx context.Context) error {
	e.closeOnce.Do(func() { close(e.release) })
	e.mu.Lock()
	server, recorder, notes := e.server, e.recorder, e.notes
	e.server, e.listener, e.recorder, e.notes = nil, nil, nil, nil
	e.mu.Unlock()
	if recorder != nil {
		_ = recorder.Close()
	}
	if notes != nil {
		_ = notes.Close()
	}
	if server != nil {
		return server.Shutdown(ctx)
	}
	return nil
}

// Scopes are the example's admin scopes: "reader" reads notes
// ("plugin:example:reader"), and may not keep one.
var Scopes = []plugins.AdminScope{
	{Name: "reader", Help: "read notes, keep none", Routes: []plugins.ScopeRoute{{Methods: []string{http.MethodGet}, Prefix: "/notes/"}}},
}

// Pages are the example's views in the web admin: read a note, keep one.
var Pages = []plugins.AdminPage{{Name: "notes", Title: "Notes", Sections: []plugins.PageSection{
	{Title: "Read a note", Kind: plugins.SectionForm, Method: http.MethodGet, Path: "/notes/{name}",
		Fields: []plugins.PageField{{Name: "name", In: plugins.FieldInPath, Required: true}}},
	{Title: "Keep a note", Kind: plugins.SectionForm, Method: http.MethodPut, Path: "/notes/{name}",
		Fields: []plugins.PageField{{Name: "name", In: plugins.FieldInPath, Required: true}, {Name: "text", Required: true}}},
}}}

// HandleRequest serves the plugin's own API, through the host:
//
//	PUT /notes/<name>   {"text":"…"}   (admin) keep a note under KeyPrefix+"notes"
//	GET /notes/<name>                  (admin, reader) read it back (404 if none)
//	GET /page.json                     (public) the notes kept and the items done
//
// A scoped caller gets 403 for what its scopes do not open, checked here
// as well as by the host.
func (e *Example) HandleRequest(ctx context.Context, req plugins.Request) (plugins.Response, error) {
	reply := func(status int, v any) (plugins.Response, error) {
		body, err := json.Marshal(v)
		return plugins.Response{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}, err
	}
	rdb, prefix, err := e.notesClient()
	if err != nil {
		return plugins.Response{}, err
	}
	name, isNote := strings.CutPrefix(req.Path, "/notes/")
	switch {
	case req.Role == plugins.RolePublic && req.Method == http.MethodGet && req.Path == plugins.PagePath:
		n, err := rdb.HLen(ctx, prefix+"notes").Result()
		if err != nil {
			return plugins.Response{}, err
		}
		e.mu.Lock()
		done := e.done
		e.mu.Unlock()
		return reply(http.StatusOK, map[string]any{"notes": n, "items_done": done})
	case req.Role == plugins.RoleScoped && !req.Permitted(Scopes):
		return plugins.ForbiddenResponse(req), nil
	case (req.Role != plugins.RoleAdmin && req.Role != plugins.RoleScoped) || !isNote || name == "" || strings.Contains(name, "/"):
		return plugins.NotFoundResponse(req), nil
	case req.Method == http.MethodGet:
		text, err := rdb.HGet(ctx, prefix+"notes", name).Result()
		if errors.Is(err, redis.Nil) {
			return reply(http.StatusNotFound, map[string]string{"error": "no note " + name, "code": "not_found"})
		}
		if err != nil {
			return plugins.Response{}, err
		}
		return reply(http.StatusOK, map[string]string{"name": name, "text": text})
	case req.Method == http.MethodPut:
		var body struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(req.Body, &body); err != nil || body.Text == "" {
			return reply(http.StatusBadRequest, map[string]string{"error": `want {"text": "…"}`, "code": "invalid"})
		}
		if err := rdb.HSet(ctx, prefix+"notes", name, body.Text).Err(); err != nil {
			return plugins.Response{}, err
		}
		details, _ := json.Marshal(map[string]string{"name": name})
		resp, err := reply(http.StatusOK, map[string]string{"name": name, "text": body.Text})
		resp.Changes = []plugins.Change{{What: "note kept", Details: details}}
		return resp, err
	}
	return plugins.NotFoundResponse(req), nil
}

// notesClient opens the notes' Redis connection on first use.
func (e *Example) notesClient() (redis.UniversalClient, string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.notes == nil {
		rdb, err := redisurl.Dial(e.redisURL)
		if err != nil {
			return nil, "", fmt.Errorf("notes: %w", err)
		}
		e.notes = rdb
	}
	return e.notes, e.settings.KeyPrefix, nil
}
