package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// btAPI is a plugin host with one plugin, "bittorrent", that serves the
// BitTorrent plugin's API over the stores a test built: the CLI talks to
// hoard's server, which forwards to it as to the real plugin.
type btAPI struct{ api *btadmin.API }

func newBTAPI(admin *btadmin.Admin, metrics *btadmin.MetricsAdmin) btAPI {
	if admin == nil {
		admin = &btadmin.Admin{}
	}
	if metrics == nil {
		metrics = &btadmin.MetricsAdmin{}
	}
	return btAPI{api: btadmin.NewAPI(admin, metrics, &btadmin.TrackerViews{}, slog.New(slog.DiscardHandler))}
}

func (b btAPI) HandleRequest(ctx context.Context, name string, req plugins.Request) (plugins.Response, error) {
	if name != "bittorrent" {
		return plugins.Response{}, fmt.Errorf("%w %q", pluginhost.ErrNoPlugin, name)
	}
	return b.api.HandleRequest(ctx, req)
}
