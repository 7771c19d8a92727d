package plugins

import (
	"context"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Serve runs the plugin factory builds as a hoard plugin process. It is the
// whole main of a plugin binary:
//
//	func main() { plugins.Serve(bittorrent.New) }
//
// It returns when the host closes the plugin. Run by hand (without the
// host's handshake) it says what it is and exits 1.
func Serve(factory Factory) {
	handshake := Handshake()
	if os.Getenv(handshake.MagicCookieKey) != handshake.MagicCookieValue {
		fmt.Fprintln(os.Stderr, "This program is a hoard plugin: hoard runs it (hoard serve --plugin NAME=PATH); it does nothing on its own.")
		os.Exit(1)
	}
	// go-plugin swaps os.Stderr for a pipe it streams to the host; this
	// logger keeps the original stderr, whose JSON lines the host parses
	// into its own log with their levels.
	stderr := os.Stderr
	logger := newPluginSideLogger(stderr)
	impl, err := factory(context.Background(), logger)
	if err != nil {
		logger.Error("plugin factory failed", "err", err)
		os.Exit(1)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         PluginSet(impl),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Level:      hclog.Info,
			Output:     stderr,
			JSONFormat: true,
		}),
	})
}
