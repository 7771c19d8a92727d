// Command hoard-example-v2 is the example plugin built as if for a future
// hoard whose plugin protocol is one version ahead: the host must refuse it
// at the handshake with a clear error.
package main

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-plugin"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
)

func main() {
	handshake := plugins.Handshake()
	handshake.ProtocolVersion = plugins.ProtocolVersion + 1
	impl, err := exampleplugin.New(context.Background(), slog.Default())
	if err != nil {
		panic(err)
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake,
		Plugins:         plugins.PluginSet(impl),
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
