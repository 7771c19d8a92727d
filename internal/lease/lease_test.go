package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/lease"
	"github.com/hoardproject/hoard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

func TestOneOwnerHoldsALeaseAndRenewsIt(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		a, c := lease.NewOwner(), lease.NewOwner()
		require.NotEqual(t, a, c)
		ok, err := lease.Take(ctx, b.Client, "hoard:lease:{test}", a, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "a free lease is taken")
		ok, err = lease.Take(ctx, b.Client, "hoard:lease:{test}", c, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "held by another owner")
		ok, err = lease.Take(ctx, b.Client, "hoard:lease:{test}", a, time.Hour)
		require.NoError(t, err)
		require.True(t, ok, "the holder renews it")
		ttl, err := b.Client.PTTL(ctx, "hoard:lease:{test}").Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute, "renewed for the new ttl")

		// The holder dies: its lease expires and another owner takes it.
		require.NoError(t, b.Client.PExpire(ctx, "hoard:lease:{test}", time.Millisecond).Err())
		require.Eventually(t, func() bool {
			ok, err := lease.Take(ctx, b.Client, "hoard:lease:{test}", c, time.Minute)
			return err == nil && ok
		}, 5*time.Second, time.Millisecond)
		holder, err := b.Client.Get(ctx, "hoard:lease:{test}").Result()
		require.NoError(t, err)
		require.Equal(t, c, holder)
	})
}
