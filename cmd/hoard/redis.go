package main

import (
	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/redisurl"
)

// newRedisClient connects to HOARD_REDIS_URL (see redisurl.Dial).
func newRedisClient(url string) (redis.UniversalClient, error) { return redisurl.Dial(url) }
