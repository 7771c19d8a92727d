package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hoardproject/hoard/internal/localredis"
	"github.com/hoardproject/hoard/internal/redismemory"
	"github.com/hoardproject/hoard/leaderboard"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// setting is one `hoard serve` setting. This table is the one place a
// setting is declared: its flag, its variable, its key in the
// configuration file, its default and its help all come from here, and
// `hoard config defaults` prints it. Precedence: flag > variable > file >
// default.
type setting struct {
	// flag is the serve flag's name; key is the file's key (the flag's
	// name in snake_case unless set).
	flag, key string
	env       string
	def       string
	help      string
	// secret: the file may not hold the value itself, only KEY_file (a
	// file to read it from) or KEY_env (a variable to read it from).
	secret bool
	// reload: a SIGHUP applies a change while hoard runs; other changes
	// are logged as needing a restart.
	reload bool
	// fromSections: the file gives it as [plugin.NAME] sections, not as a
	// key (see pluginSections).
	fromSections bool
	ptr          func(o *serveOptions) any
}

func (s setting) fileKey() string {
	if s.key != "" {
		return s.key
	}
	return strings.ReplaceAll(s.flag, "-", "_")
}

// serveSettings is every `hoard serve` setting.
var serveSettings = []setting{
	{flag: "listen", env: "HOARD_LISTEN", def: "127.0.0.1:8080", help: "address to listen on",
		ptr: func(o *serveOptions) any { return &o.listen }},
	{flag: "redis-url", env: "HOARD_REDIS_URL", help: "redis:// or unix:// URL, or comma-separated cluster nodes; empty = run a local redis-server",
		ptr: func(o *serveOptions) any { return &o.redisURL }},
	{flag: "redis-fsync", env: "HOARD_REDIS_FSYNC", def: string(localredis.DefaultFsyncPolicy),
		help: "the supervised redis-server's appendfsync: everysec (a Redis or machine crash can lose ~1 s of acknowledged writes), always (loses none, slower: see docs/durability) or no; an external Redis keeps its own setting",
		ptr:  func(o *serveOptions) any { return &o.redisFsync }},
	{flag: "redis-memory-alarm", env: "HOARD_REDIS_MEMORY_ALARM", def: strconv.FormatFloat(redismemory.DefaultThreshold, 'g', -1, 64),
		help: "share of the Redis's maxmemory at which hoard logs an alarm and sets hoard_redis_memory_alarm, supervised or external",
		ptr:  func(o *serveOptions) any { return &o.redisMemoryAlarm }},
	{flag: "redis-maxmemory", env: "HOARD_REDIS_MAXMEMORY", def: localredis.DefaultMaxMemory,
		help: "the supervised redis-server's memory limit: a size (4gb, 512mb), a share of the machine's memory (50%) or 0 for none; past it writes are refused, nothing is evicted",
		ptr:  func(o *serveOptions) any { return &o.redisMaxMemory }},
	{flag: "redis-aof-replay-target", env: "HOARD_REDIS_AOF_REPLAY_TARGET", def: localredis.DefaultAOFReplayTarget.String(),
		help: "rewrite the supervised redis-server's AOF once replaying its newest part would take longer than this; 0 leaves it to Redis's size trigger",
		ptr:  func(o *serveOptions) any { return &o.redisReplayTarget }},
	{flag: "data-dir", env: "HOARD_DATA_DIR", def: "./data", help: "where the local redis-server keeps its data and offloaded segment files go",
		ptr: func(o *serveOptions) any { return &o.dataDir }},
	{flag: "node", env: "HOARD_NODE", help: "this frontend's name in segment records, which it refills (default: an id kept in the data directory)",
		ptr: func(o *serveOptions) any { return &o.node }},
	{flag: "admin-token", env: "HOARD_ADMIN_TOKEN", secret: true, help: "token the admin API requires (the bootstrap admin's)",
		ptr: func(o *serveOptions) any { return &o.adminToken }},
	{flag: "metrics-token", env: "HOARD_METRICS_TOKEN", secret: true, help: "token /metrics requires; empty = the admin token, or open when neither is set",
		ptr: func(o *serveOptions) any { return &o.metricsToken }},
	{flag: "insecure-no-admin-token", env: "HOARD_INSECURE_NO_ADMIN_TOKEN", def: "false", help: "DEVELOPMENT ONLY: allow admin calls without a token when none is set",
		ptr: func(o *serveOptions) any { return &o.insecureNoAdminToken }},
	{flag: "projects-file", env: "HOARD_PROJECTS_FILE", def: "projects.json", reload: true, help: "Warrior HQ projects.json to serve",
		ptr: func(o *serveOptions) any { return &o.projectsFile }},
	{flag: "public-url", env: "HOARD_PUBLIC_URL", help: "public base URL, for leaderboard links",
		ptr: func(o *serveOptions) any { return &o.publicURL }},
	{flag: "trusted-proxy", key: "trusted_proxies", env: "HOARD_TRUSTED_PROXIES", help: "proxy IP/CIDR whose X-Forwarded-For is trusted; repeatable (variable: comma-separated)",
		ptr: func(o *serveOptions) any { return &o.trustedProxies }},
	{flag: "create-listed-projects", env: "HOARD_CREATE_LISTED_PROJECTS", def: "false", help: "create any project named in the projects file that does not exist yet",
		ptr: func(o *serveOptions) any { return &o.createListed }},
	{flag: "log-format", env: "HOARD_LOG_FORMAT", def: "text", help: "text or json (json: every line, go-redis's included, is a JSON object)",
		ptr: func(o *serveOptions) any { return &o.logFormat }},
	{flag: "log-level", env: "HOARD_LOG_LEVEL", def: "info", reload: true,
		help: "debug, info, warn or error: debug adds the supervised redis-server's own lines and plugins' debug output",
		ptr:  func(o *serveOptions) any { return &o.logLevel }},
	{flag: "max-viewers", reload: true, env: "HOARD_MAX_VIEWERS", def: "0", help: "live leaderboard viewers per frontend; 0 = derived from the descriptor limit, which also bounds a larger value",
		ptr: func(o *serveOptions) any { return &o.maxViewers }},
	{flag: "max-viewers-per-address", reload: true, env: "HOARD_MAX_VIEWERS_PER_ADDRESS", def: strconv.Itoa(leaderboard.DefaultMaxViewersPerAddress),
		help: "live viewers per client IPv4 address or IPv6 /64; more get 429",
		ptr:  func(o *serveOptions) any { return &o.maxViewersPerAddress }},
	{flag: "viewer-idle-timeout", reload: true, env: "HOARD_VIEWER_IDLE_TIMEOUT", def: leaderboard.DefaultViewerIdleTimeout.String(),
		help: "drop a viewer that sent nothing, not even a pong, for this long",
		ptr:  func(o *serveOptions) any { return &o.viewerIdleTimeout }},
	{flag: "all-frontends-count-batches", env: "HOARD_ALL_FRONTENDS_COUNT_BATCHES", def: "true",
		help: "every frontend on this Redis runs a build that counts claim batches down (hoard from claim batches on): a multi done naming one whole batch is then completed without reading each item's record; set false while a frontend of an older build may still run (docs/operators.md, \"Upgrading\")",
		ptr:  func(o *serveOptions) any { return &o.allFrontendsCountBatches }},
	{flag: "plugin", env: "HOARD_PLUGINS", fromSections: true,
		help: "plugin to run: NAME=PATH for a plugin binary, NAME for a builtin; repeatable (variable: comma-separated; file: a [plugin.NAME] section, path = PATH)",
		ptr:  func(o *serveOptions) any { return &o.plugins.plugins }},
	{flag: "plugin-settings", env: "HOARD_PLUGIN_SETTINGS", fromSections: true, reload: true,
		help: "a plugin's own settings: NAME=JSON or NAME=@FILE; repeatable (variable: one per line; file: a [plugin.NAME.settings] section)",
		ptr:  func(o *serveOptions) any { return &o.plugins.settings }},
	{flag: "plugin-worker-token", key: "plugin_worker_tokens", env: "HOARD_PLUGIN_WORKER_TOKENS", secret: true,
		help: "a token that lets an outside worker claim a plugin's items through the warrior API (Authorization: Bearer TOKEN): NAME=TOKEN for every item type of the plugin, NAME:TYPE,TYPE=TOKEN for some; repeatable (variable: comma-separated)",
		ptr:  func(o *serveOptions) any { return &o.plugins.workerTokens }},
	{flag: "plugin-event-retry", env: "HOARD_PLUGIN_EVENT_RETRY", def: pluginhost.DefaultEventRetryAfter.String(),
		help: "how long a plugin's item event may stay unacknowledged (its frontend or plugin died mid-hook) before another frontend delivers it again",
		ptr:  func(o *serveOptions) any { return &o.plugins.eventRetry }},
}

// listFlags take repeated values one at a time; the rest of the lists
// take comma-separated values (pflag's StringSlice).
var listFlags = map[string]bool{"plugin": true, "plugin-settings": true, "plugin-worker-token": true}

// register adds the setting's flag to f, bound to its field of o.
func (s setting) register(f *pflag.FlagSet, o *serveOptions) {
	usage := s.help + " ($" + s.env + ")"
	switch p := s.ptr(o).(type) {
	case *string:
		f.StringVar(p, s.flag, s.def, usage)
	case *bool:
		f.BoolVar(p, s.flag, s.def == "true", usage)
	case *int:
		n, err := strconv.Atoi(s.def)
		mustDefault(s, err)
		f.IntVar(p, s.flag, n, usage)
	case *float64:
		x, err := strconv.ParseFloat(s.def, 64)
		mustDefault(s, err)
		f.Float64Var(p, s.flag, x, usage)
	case *time.Duration:
		d, err := time.ParseDuration(s.def)
		mustDefault(s, err)
		f.DurationVar(p, s.flag, d, usage)
	case *[]string:
		if listFlags[s.flag] {
			f.StringArrayVar(p, s.flag, nil, usage)
		} else {
			f.StringSliceVar(p, s.flag, nil, usage)
		}
	default:
		panic(fmt.Sprintf("setting %s: no flag for %T", s.flag, p))
	}
}

// mustDefault: a default that does not parse is a bug in the table (a
// test builds the command, so it never ships).
func mustDefault(s setting, err error) {
	if err != nil {
		panic(fmt.Sprintf("setting %s: default %q: %v", s.flag, s.def, err))
	}
}

// envValues splits a variable's value into the flag values it stands for.
func (s setting) envValues(raw string) []string {
	switch {
	case s.flag == "plugin-settings":
		var out []string
		for _, line := range strings.Split(raw, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
		return out
	case listFlags[s.flag]:
		return splitList(raw)
	}
	return []string{raw}
}
