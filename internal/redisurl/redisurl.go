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
//
// A single server's client never sends a command twice (MaxRetries -1,
// whatever the URL says): go-redis would resend one after a read timeout
// or a connection broken after the write, when it may have run already,
// and most of hoard's writes (scripts, counters) are not idempotent. A dead
// pooled connection (Redis restarted) is still found by go-redis's health
// check before it is used; what fails is the caller's error to handle. A
// cluster's client resends after such errors in its redirect loop however
// it is set: luascript marks its calls so that it does not.
func Dial(url string) (redis.UniversalClient, error) {
	if !strings.Contains(url, ",") {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("HOARD_REDIS_URL %q: %w", url, err)
		}
		opts.MaxRetries = -1
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
