package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// benchSite is the site of announce-private's trackers: it reads each
// tracker's outbox the way a polling site does (pending events after its
// cursor, a page at a time, with their records) and acknowledges what it
// read. A site that never did would leave every event in the tracker's
// Redis: until s51 the accounting-on Redis ended an invocation holding
// about 800 MB of events nobody read, against none off, and its heap
// kept growing through the measured runs. The Redis work of reading and
// acknowledging lands on the tracker's Redis, as a site's would; the
// decoding of what was read lands in this process, where a site's would
// be on the site's machine.
type benchSite struct {
	box *outbox.Outbox

	mu     sync.Mutex
	stop   context.CancelFunc
	done   chan struct{}
	err    error
	cursor uint64
	acked  int64
}

// siteInterval is how often the site polls while announces run: a site's
// feed job runs about as often as the feed delivers.
const siteInterval = 500 * time.Millisecond

func newBenchSite(rdb *redis.Client) (*benchSite, error) {
	_, policy, err := outbox.ParseSettings(nil)
	if err != nil {
		return nil, err
	}
	return &benchSite{box: outbox.New(rdb, outbox.Config{Policy: policy})}, nil
}

// start polls every siteInterval until stopPolling.
func (s *benchSite) start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	ctx, s.stop = context.WithCancel(ctx)
	done := make(chan struct{}) // the goroutine's own: stopPolling clears s.done
	s.done = done
	go func() {
		defer close(done)
		tick := time.NewTicker(siteInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := s.drain(ctx); err != nil && !errors.Is(err, context.Canceled) {
				s.mu.Lock()
				s.err = errors.Join(s.err, err)
				s.mu.Unlock()
				return
			}
		}
	}()
}

// stopPolling ends the polling that start began and returns its first
// error. Safe when not polling.
func (s *benchSite) stopPolling() error {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.stop, s.done = nil, nil
	s.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.err
	s.err = nil
	return err
}

// drain reads and acknowledges every pending event, a page at a time.
// Only one drain runs at a time (start's loop, or the caller's once
// polling stopped).
func (s *benchSite) drain(ctx context.Context) error {
	for {
		events, next, err := s.box.Pending(ctx, s.cursor, outbox.MaxListLimit)
		if err != nil {
			return fmt.Errorf("site: reading the outbox: %w", err)
		}
		if len(events) > 0 {
			ids := make([]uint64, len(events))
			for i, e := range events {
				ids[i] = e.ID
			}
			acked, err := s.box.Ack(ctx, ids)
			if err != nil {
				return fmt.Errorf("site: acknowledging %d events: %w", len(ids), err)
			}
			s.mu.Lock()
			s.acked += int64(acked.Now)
			s.mu.Unlock()
		}
		s.cursor = next
		if len(events) < outbox.MaxListLimit {
			return nil
		}
	}
}

// acknowledged is how many events the site has acknowledged.
func (s *benchSite) acknowledged() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}
