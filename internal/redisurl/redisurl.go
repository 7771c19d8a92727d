// Package redisurl turns hoard's Redis URL into a client, the same way for
// hoard serve and for plugins that get the URL in Configure.
package redisurl

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Dial connects to HOARD_REDIS_URL: one redis://, rediss:// or
// unix:// URL means one server; a comma-separated list of nodes (host:port
// or redis://host:port) means a Redis Cluster.
func Dial(url string) (redis.UniversalClient, error) {
	if !strings.Contains(url, ",") {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("HOARD_REDIS_URL %q: %w", url, err)
		}
		return redis.NewClient(opts), nil
	}
	var addrs []string
	var base *redis.Options
	for _, node := range strings.Split(url, ",") {
		node = strings.TrimSpace(node)
		if node == "" {
			continue
		}
		if !strings.Contains(node, "://") {
			node = "redis://" + node
		}
		opts, err := redis.ParseURL(node)
		if err != nil {
			return nil, fmt.Errorf("cluster node %q: %w", node, err)
		}
		if base == nil {
			base = opts
		}
		addrs = append(addrs, opts.Addr)
	}
	if base == nil {
		return nil, fmt.Errorf("HOARD_REDIS_URL %q names no nodes", url)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, Username: base.Username, Password: base.Password, TLSConfig: base.TLSConfig,
	}), nil
}
