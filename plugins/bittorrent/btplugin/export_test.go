package btplugin

import (
	"context"
	"log/slog"

	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TokenReporter is what the plugin hands the store as Config.OnToken.
func TokenReporter(ob *outbox.Outbox, logger *slog.Logger) func(context.Context, swarm.TokenEvent) {
	return tokenReporter{ob: ob, logger: logger}.report
}

// FeedDeliverer is what the plugin hands the store as Config.OnFeed.
func FeedDeliverer(ob *outbox.Outbox) func(context.Context, []swarm.FeedBatch) error {
	return newFeedDeliverer(ob).deliver
}
