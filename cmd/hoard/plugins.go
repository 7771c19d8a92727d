package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// builtinPlugins are the plugins compiled into hoard, by name: `--plugin
// NAME` with no path runs one in-process. An explicit map, not init()
// registration, so what is built in reads in one place.
var builtinPlugins = map[string]plugins.Factory{
	"bittorrent": btplugin.New,
}

// pluginOptions are serve's plugin flags.
type pluginOptions struct {
	plugins  []string
	settings []string
	// workerTokens are NAME[:TYPE,TYPE]=TOKEN (pluginhost.ParseWorkerTokens).
	workerTokens []string
	// eventRetry is how long a plugin event may stay unacknowledged (its
	// frontend or plugin died mid-hook) before another frontend takes it.
	eventRetry time.Duration
}

// startPlugins starts the plugin host. With no plugin configured it starts
// nothing, and its Stop is still safe to call. A plugin that fails to start
// is retried in the background: it never keeps hoard from serving.
func startPlugins(ctx context.Context, o pluginOptions, dataDir, redisURL string, rdb redis.UniversalClient,
	engine *queues.Engine, logger *slog.Logger) (*pluginhost.Host, error) {
	specs, err := pluginhost.ParseSpecs(o.plugins, o.settings)
	if err != nil {
		return nil, err
	}
	tokens, err := pluginhost.ParseWorkerTokens(o.workerTokens)
	if err != nil {
		return nil, fmt.Errorf("--plugin-worker-token: %w", err)
	}
	host, err := pluginhost.NewHost(pluginhost.Options{
		WorkerTokens: tokens,
		Plugins:      specs, Builtins: builtinPlugins, RedisURL: redisURL, Redis: rdb,
		Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine), Logger: logger,
		EventRetryAfter: o.eventRetry,
		PIDDir:          filepath.Join(dataDir, "plugins"),
	})
	if err != nil {
		return nil, err
	}
	if err := host.Start(ctx); err != nil {
		return nil, fmt.Errorf("plugins: %w", err)
	}
	for _, spec := range specs {
		logger.Info("plugin configured", "plugin", spec.Name, "path", spec.Path)
		if spec.Path == "" {
			// The host recovers a panic in its calls into a builtin, but not
			// in the builtin's own goroutines (its listeners, its loops):
			// only a separate process keeps a crash away from the warrior API.
			logger.Warn("plugin runs in-process: a crash in it is hoard's crash; run its binary (NAME=PATH) in production",
				"plugin", spec.Name)
		}
	}
	return host, nil
}
