package localredis

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// pingOnce uses a fresh client per attempt: go-redis' pool remembers dial
// failures and throttles redials (about once a second), which would turn a
// 50ms poll into a 1s one while the socket does not exist yet.
//
// A plain dial comes first because go-redis reports every failed dial through
// its process-wide logger, which would spam stderr during every start-up.
func (s *Server) pingOnce(ctx context.Context) error {
	dialer := net.Dialer{Timeout: time.Second}
	conn, err := dialer.DialContext(ctx, s.Network(), s.Address())
	if err != nil {
		return err
	}
	conn.Close()

	client := redis.NewClient(&redis.Options{
		Network:       s.Network(),
		Addr:          s.Address(),
		DialTimeout:   time.Second,
		ReadTimeout:   time.Second,
		DialerRetries: 1,
		// We poll ourselves; go-redis' own retries would only blur the timing.
		MaxRetries: -1,
		PoolSize:   1,
		// Redis 7.0 knows neither CLIENT SETINFO nor maintenance notifications;
		// don't make every probe connection try them.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	defer client.Close()
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return client.Ping(pingCtx).Err()
}

// waitReady PINGs the child every readyPollPeriod until it answers, the child
// exits, or ctx ends. PING fails with LOADING while Redis replays a large AOF,
// so "answers PING" really means "has its data".
func (s *Server) waitReady(ctx context.Context, c *child) error {
	ticker := time.NewTicker(readyPollPeriod)
	defer ticker.Stop()
	var lastErr error
	for {
		lastErr = s.pingOnce(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-c.exited:
			// Give the output reader a moment so the tail explains the exit.
			select {
			case <-c.outputDone:
			case <-time.After(time.Second):
			}
			return fmt.Errorf("redis-server exited during start-up: %v", c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("no PING reply from %s %s: %w (last error: %v)", s.Network(), s.Address(), ctx.Err(), lastErr)
		case <-ticker.C:
		}
	}
}
