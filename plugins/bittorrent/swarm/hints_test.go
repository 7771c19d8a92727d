package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestChangesReachStartedFrontendsThroughTheHint: with both frontends
// started, a passkey or whitelist change made through one reaches the
// other's next announces without its cache expiring (the clock never
// moves): the hint on btstore.CacheHintChannel dropped its copy.
func TestChangesReachStartedFrontendsThroughTheHint(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, hash := privateFixture(t, b, swarm.Config{CacheTTL: time.Hour})
		ctx := context.Background()
		require.NoError(t, f.store.Start(ctx))
		other, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: f.clock, Logger: quietLogger, CacheTTL: time.Hour})
		require.NoError(t, err)
		require.NoError(t, other.Start(ctx))
		t.Cleanup(func() { _ = other.Stop() })

		f.announce(hash, peerID("-TR", 5), 5, passkey("passkeyA")) // caches passkeyA and the whitelist
		require.Equal(t, "unknown passkey", f.refuse(hash, peerID("-TR", 1), 1, passkey("passkeyC")))

		require.NoError(t, other.AddUser(ctx, pk("passkeyC"), "carol"))
		require.Eventually(t, func() bool {
			_, err := f.store.Announce(ctx, request(hash, peerID("-TR", 1), 1, passkey("passkeyC")))
			return err == nil
		}, 5*time.Second, time.Millisecond, "a new passkey is admitted without waiting for the cache")

		require.NoError(t, other.RemoveUser(ctx, pk("passkeyA")))
		require.Eventually(t, func() bool {
			_, err := f.store.Announce(ctx, request(hash, peerID("-TR", 5), 5, passkey("passkeyA")))
			return err != nil
		}, 5*time.Second, time.Millisecond, "a removed passkey is refused without waiting for the cache")
		require.Equal(t, "unknown passkey", f.refuse(hash, peerID("-TR", 5), 5, passkey("passkeyA")))

		require.NoError(t, other.RemoveClient(ctx, "-TR"))
		require.Eventually(t, func() bool {
			_, err := f.store.Announce(ctx, request(hash, peerID("-TR", 1), 1, passkey("passkeyC")))
			return err != nil
		}, 5*time.Second, time.Millisecond, "a client off the whitelist is refused without waiting for the cache")
		require.Equal(t, "your client is not whitelisted", f.refuse(hash, peerID("-TR", 1), 1, passkey("passkeyC")))
	})
}
