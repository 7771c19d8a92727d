package swarm

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every frontend caches passkey lookups and the client whitelist for
// Config.CacheTTL, so an announce costs no round trip for them. A change
// made through a Store drops that Store's copy at once, and the Store
// publishes a hint on btstore.CacheHintChannel so every other frontend drops its
// copy too: the next announce anywhere sees the change. Pub/Sub is a hint,
// never the truth (DESIGN invariant 6): a frontend that was away from the
// channel drops its whole cache when it subscribes again, and the TTL is
// the backstop for anything else.

// Hints, as published.
const (
	hintWhitelist     = "whitelist"
	hintDeny          = "deny"
	hintWindows       = "credit-windows"
	hintPasskeyPrefix = "passkey:"
	hintTorrentPrefix = "torrent:" // unregistered: drop its swarm view
)

// publishHint tells the other frontends to drop what msg names. A failure
// is logged, not returned: the change itself is made, and the others see
// it within the TTL.
func (s *Store) publishHint(ctx context.Context, msg string) {
	if err := s.rdb.Publish(ctx, btstore.CacheHintChannel, msg).Err(); err != nil {
		s.logger.WarnContext(ctx, "swarm: could not tell the other frontends of a change; they see it within the cache TTL",
			"cache_ttl", s.cfg.CacheTTL, "error", err)
	}
}

// applyHint drops the cached copy a hint names.
func (s *Store) applyHint(msg string) {
	if passkey, ok := strings.CutPrefix(msg, hintPasskeyPrefix); ok {
		s.passkeys.invalidate(passkey)
		return
	}
	if hex, ok := strings.CutPrefix(msg, hintTorrentPrefix); ok {
		if hash, ok := btstore.ParseHexInfoHash(hex); ok {
			s.dropView(hash)
		}
		return
	}
	switch msg {
	case hintWhitelist:
		s.whitelist.invalidate()
	case hintDeny:
		s.deny.invalidate()
	case hintWindows:
		s.windows.invalidate()
	}
}

// subscribeHints subscribes to btstore.CacheHintChannel and waits for Redis to
// confirm, so a change made after Start returns reaches this Store.
func (s *Store) subscribeHints(ctx context.Context) (*redis.PubSub, error) {
	sub := s.rdb.Subscribe(ctx, btstore.CacheHintChannel)
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("swarm: subscribing to cache hints: %w", err)
	}
	return sub, nil
}

// hintLoop applies the hints until ctx ends. go-redis subscribes again
// after a broken connection; the confirmation of that subscription means
// hints may have been missed, so the whole cache goes.
func (s *Store) hintLoop(ctx context.Context, sub *redis.PubSub) {
	defer s.wg.Done()
	// Closing the subscription ends the channel's goroutine; a read
	// blocked on the connection does not watch ctx.
	defer sub.Close()
	ch := sub.ChannelWithSubscriptions(redis.WithChannelSize(1000))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					s.passkeys.clear()
					s.whitelist.invalidate()
					s.deny.invalidate()
					s.windows.invalidate()
				}
			case *redis.Message:
				s.applyHint(m.Payload)
			}
		}
	}
}
