package main

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestRedisURLForms: HOARD_REDIS_URL as one URL reaches one server, and as
// a comma-separated node list reaches a Redis Cluster the engine works on.
func TestRedisURLForms(t *testing.T) {
	ctx := context.Background()
	for _, b := range redistest.Require(t) {
		var url string
		switch client := b.Client.(type) {
		case *redis.ClusterClient:
			url = strings.Join(client.Options().Addrs, ", ")
		case *redis.Client:
			url = "redis://" + client.Options().Addr + "/0"
		}
		rdb, err := newRedisClient(url)
		require.NoError(t, err, url)
		require.NoError(t, rdb.Ping(ctx).Err())
		_, isCluster := rdb.(*redis.ClusterClient)
		require.Equal(t, b.Name == "cluster", isCluster, url)

		engine := queues.NewEngine(rdb, queues.Options{})
		_, err = engine.CreateProject(ctx, "urlform-"+b.Name, queues.SettingsPatch{})
		require.NoError(t, err)
		_, err = engine.Enqueue(ctx, "urlform-"+b.Name, queues.Target{Queue: queues.QueueTodo}, []queues.QueueItem{{Name: "x"}})
		require.NoError(t, err)
		res, err := engine.Claim(ctx, queues.ClaimRequest{Project: "urlform-" + b.Name, Downloader: "tester1", Count: 1})
		require.NoError(t, err)
		require.Equal(t, "x", res.Items[0].Name)
		require.NoError(t, rdb.Close())
	}
	_, err := newRedisClient("ftp://nope")
	require.Error(t, err)
	_, err = newRedisClient(" , ")
	require.Error(t, err)
}
