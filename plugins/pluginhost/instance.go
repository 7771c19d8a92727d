package pluginhost

import (
	"syscall"

	"github.com/hoardproject/hoard/internal/childproc"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/hoardproject/hoard/plugins"
)

// instance is one running incarnation of a plugin: a builtin built by its
// Factory, or an external process behind go-plugin. A restart makes a new
// instance; calls in flight on the old one fail or are abandoned.
type instance struct {
	plugin plugins.Plugin
	// client and rpc are set for an external plugin only.
	client *plugin.Client
	rpc    plugin.ClientProtocol
	pid    int

	// inflight bounds the calls still running, including the ones the host
	// stopped waiting for (a plugin that ignores its deadline): past the
	// bound, calls fail at once with ErrBusy instead of piling up
	// goroutines.
	inflight chan struct{}

	// broken is closed when an in-process call panicked.
	broken     chan struct{}
	brokenOnce sync.Once
	brokenErr  error

	stopOnce sync.Once
}

func newInstance(p plugins.Plugin, maxInflight int) *instance {
	return &instance{plugin: p, inflight: make(chan struct{}, maxInflight), broken: make(chan struct{})}
}

// startBuiltin builds an in-process plugin with its Factory.
func startBuiltin(ctx context.Context, factory plugins.Factory, logger *slog.Logger, timeout time.Duration, maxInflight int) (*instance, error) {
	var p plugins.Plugin
	err := guarded(ctx, timeout, func(ctx context.Context) error {
		var err error
		p, err = factory(ctx, logger)
		return err
	})
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("factory returned no plugin")
	}
	return newInstance(p, maxInflight), nil
}

// startExternal launches a plugin binary and handshakes with it.
func startExternal(path string, logger *slog.Logger, startTimeout time.Duration, maxInflight int) (*instance, error) {
	cmd := exec.Command(path)
	cmd.Env = pluginEnv(os.Environ())
	// The plugin owns sockets (the tracker's ports): it must not outlive
	// hoard, even a hoard killed with SIGKILL.
	childproc.DieWithParent(cmd, syscall.SIGKILL)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake(),
		Plugins:          plugins.PluginSet(nil),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     startTimeout,
		Logger:           newHCLogAdapter(logger),
		SyncStdout:       &lineLogger{logger: logger, level: slog.LevelInfo, attrs: []any{"stream", "stdout"}},
		SyncStderr:       &lineLogger{logger: logger, level: slog.LevelWarn, attrs: []any{"stream", "stderr"}},
	})
	// Start forks the plugin; it must happen on childproc's thread for the
	// parent-death signal to be tied to hoard's life (see childproc).
	err := childproc.Do(func() error { _, err := client.Start(); return err })
	var rpc plugin.ClientProtocol
	if err == nil {
		rpc, err = client.Client()
	}
	if err != nil {
		client.Kill()
		if strings.Contains(err.Error(), "incompatible API version") {
			return nil, fmt.Errorf("%w: %s speaks another plugin protocol than this hoard (version %d): %v; rebuild the plugin against this hoard",
				plugins.ErrIncompatible, path, plugins.ProtocolVersion, err)
		}
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	raw, err := rpc.Dispense(plugins.PluginSetKey)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("dispense from %s: %w", path, err)
	}
	p, ok := raw.(plugins.Plugin)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("%s served a %T, not a hoard plugin", path, raw)
	}
	inst := newInstance(p, maxInflight)
	inst.client, inst.rpc = client, rpc
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	return inst, nil
}

// pluginEnv is the environment a plugin process gets: hoard's, without
// hoard's own HOARD_* settings (tokens among them). A plugin gets its
// configuration through Configure.
func pluginEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOARD_") {
			out = append(out, kv)
		}
	}
	return out
}

// call runs fn against the plugin with a deadline. It returns when fn does
// or when the deadline passes, whichever is first: a plugin that ignores its
// context costs a goroutine (bounded by inflight), never the caller's time.
func (i *instance) call(ctx context.Context, timeout time.Duration, fn func(context.Context, plugins.Plugin) error) error {
	select {
	case i.inflight <- struct{}{}:
	default:
		return plugins.ErrBusy
	}
	err := guarded(ctx, timeout, func(ctx context.Context) error {
		defer func() { <-i.inflight }()
		return fn(ctx, i.plugin)
	})
	if errors.Is(err, plugins.ErrPanicked) {
		i.markBroken(err)
	}
	return err
}

func (i *instance) markBroken(err error) {
	i.brokenOnce.Do(func() {
		i.brokenErr = err
		close(i.broken)
	})
}

// dead reports whether the instance cannot serve any more: an in-process
// call panicked or the process exited.
func (i *instance) dead() bool {
	select {
	case <-i.broken:
		return true
	default:
		return i.exited()
	}
}

// exited reports whether an external plugin's process is gone.
func (i *instance) exited() bool { return i.client != nil && i.client.Exited() }

// ping checks an external plugin's gRPC connection (go-plugin's health
// service). Builtins have no connection to check.
func (i *instance) ping(ctx context.Context, timeout time.Duration) error {
	if i.rpc == nil {
		return nil
	}
	// ClientProtocol.Ping takes no context; guarded stops waiting for it.
	return guarded(ctx, timeout, func(context.Context) error { return i.rpc.Ping() })
}

// stop closes the plugin (at most grace) and, for an external plugin, kills
// its process (go-plugin asks it to exit and kills it if it has not after
// two seconds). Safe to call twice.
func (i *instance) stop(grace time.Duration) {
	i.stopOnce.Do(func() {
		if !i.exited() {
			// Close bypasses inflight: it must reach even a busy plugin.
			_ = guarded(context.Background(), grace, func(ctx context.Context) error { return i.plugin.Close(ctx) })
		}
		if i.client != nil {
			i.client.Kill()
		}
	})
}

// guarded runs fn with a deadline in its own goroutine, returns its error or
// the context's once the deadline passes, and turns a panic into
// ErrPanicked with the stack.
func guarded(ctx context.Context, timeout time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("%w: %v\n%s", plugins.ErrPanicked, r, debug.Stack())
			}
		}()
		done <- fn(ctx)
	}()
	select {
	case err := <-done:
		cancel()
		return err
	case <-ctx.Done():
		cancel()
		return fmt.Errorf("plugin call abandoned (limit %s): %w", timeout, ctx.Err())
	}
}
