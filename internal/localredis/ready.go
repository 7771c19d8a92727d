package localredis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// newClient is a small client for the supervisor's own calls (readiness,
// INFO, CONFIG SET, BGREWRITEAOF), never the application's.
func (s *Server) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Network:       s.Network(),
		Addr:          s.Address(),
		DialTimeout:   time.Second,
		ReadTimeout:   2 * time.Second,
		DialerRetries: 1,
		// We poll ourselves; go-redis' own retries would only blur the timing.
		MaxRetries: -1,
		PoolSize:   1,
		// Redis 7.0 knows neither CLIENT SETINFO nor maintenance notifications;
		// don't make every probe connection try them.
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

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

	client := s.newClient()
	defer client.Close()
	pingCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return client.Ping(pingCtx).Err()
}

// isLoading: Redis answers LOADING to most commands while it replays its
// AOF; INFO still works.
func isLoading(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "LOADING")
}

// info reads one INFO section as name -> value.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	client := s.newClient()
	defer client.Close()
	infoCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	text, err := client.Info(infoCtx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[name] = value
		}
	}
	return fields, nil
}

// learnPID asks redis-server its pid (a keeper's child is not ours to see).
func (s *Server) learnPID(ctx context.Context, inst *instance) {
	fields, err := s.info(ctx, "server")
	if err != nil {
		return
	}
	if pid, err := strconv.Atoi(fields["process_id"]); err == nil && pid > 0 {
		inst.pid.Store(int64(pid))
	}
}

// waitReady PINGs the instance every readyPollPeriod until it answers, it
// dies, or ctx ends. PING fails with LOADING while Redis replays its AOF,
// so "answers PING" really means "has its data". A loading redis-server is
// waited for however long it takes, its progress logged every
// loadingLogPeriod: killing it for being slow would only start the replay
// over. Only one that never answers at all for noAnswerTimeout is given up.
func (s *Server) waitReady(ctx context.Context, inst *instance) error {
	ticker := time.NewTicker(readyPollPeriod)
	defer ticker.Stop()
	began := time.Now()
	answered := false
	var lastLog time.Time
	var totalBytes int64
	for {
		err := s.pingOnce(ctx)
		if err == nil {
			if inst.pid.Load() == 0 {
				s.learnPID(ctx, inst)
			}
			inst.served.Store(true)
			if totalBytes > 0 && !inst.adopted {
				took := time.Since(inst.startedAt)
				rate := s.noteReplay(totalBytes, took, inst.adopted)
				s.logger.Info("redis-server loaded its data", "bytes", totalBytes, "took", took.Round(time.Millisecond),
					"mb_per_second", strconv.FormatFloat(rate/1e6, 'f', 1, 64))
			}
			return nil
		}
		if isLoading(err) {
			answered = true
			if inst.pid.Load() == 0 {
				s.learnPID(ctx, inst)
			}
			if time.Since(lastLog) >= loadingLogPeriod {
				lastLog = time.Now()
				if fields, err := s.info(ctx, "persistence"); err == nil && fields["loading"] == "1" {
					totalBytes, _ = strconv.ParseInt(fields["loading_total_bytes"], 10, 64)
					s.logger.Info("redis-server is loading its data; waiting for it",
						"loaded_perc", fields["loading_loaded_perc"], "eta_seconds", fields["loading_eta_seconds"],
						"loaded_bytes", fields["loading_loaded_bytes"], "total_bytes", fields["loading_total_bytes"],
						"for", time.Since(began).Round(time.Millisecond))
				}
			}
		}
		select {
		case <-inst.gone:
			// Give the output reader a moment so the tail explains the exit.
			if inst.outputDone != nil {
				select {
				case <-inst.outputDone:
				case <-time.After(time.Second):
				}
			}
			return fmt.Errorf("redis-server exited during start-up: %v", inst.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("no PING reply from %s %s: %w (last error: %v)", s.Network(), s.Address(), ctx.Err(), err)
		case <-ticker.C:
		}
		if !answered && time.Since(began) > noAnswerTimeout {
			return fmt.Errorf("no answer from %s %s within %s, not even LOADING (last error: %v)", s.Network(), s.Address(), noAnswerTimeout, err)
		}
	}
}
