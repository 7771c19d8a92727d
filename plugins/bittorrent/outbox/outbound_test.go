package outbox_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/netguard"
	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// TestWebhookRedirectIsAFailedDelivery: the webhook answers 307 to a
// second receiver. The signed batch never reaches the second one, the
// 307 is a failed attempt (retried with backoff like any other), and the
// events stay undelivered, however often it is tried.
func TestWebhookRedirectIsAFailedDelivery(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		second := newReceiver(t, clk.Now, func(int) int { return http.StatusNoContent })
		first := newReceiver(t, clk.Now, func(int) int { return http.StatusTemporaryRedirect })
		first.server.Config.Handler = redirectTo(second.url(), first.server.Config.Handler)
		ob := newOutbox(t, b, webhookPolicy(t, first.url(), `,"backoff":"1s","max_backoff":"2s"`), clk)
		require.NoError(t, ob.Append(ctx, events("moved", 3)))

		for range 3 {
			round, err := ob.DeliverOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, outbox.Round{Taken: 3, Failed: 3}, round)
			clk.Advance(2 * time.Second)
		}
		_, _, requests, _ := first.snapshot()
		require.Equal(t, 3, requests, "each attempt reached the webhook")
		received, accepted, requests, _ := second.snapshot()
		require.Zero(t, requests, "the redirect's target got nothing")
		require.Empty(t, received)
		require.Empty(t, accepted)
		pending, _, err := ob.Pending(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, pending, 3)
		for _, e := range pending {
			require.Equal(t, 3, e.Attempts)
			require.Contains(t, e.LastError, "307")
			require.Contains(t, e.LastError, "redirect, which is never followed")
		}
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Counts{Pending: 3, Appended: 3, Attempts: 9, Failures: 9}, counts)
	})
}

// redirectTo answers every request with a 307 to target (the behaviour
// of next is kept for its counting, its status ignored).
func redirectTo(target string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusSink{header: http.Header{}}
		next.ServeHTTP(rec, r)
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	})
}

type statusSink struct{ header http.Header }

func (s *statusSink) Header() http.Header         { return s.header }
func (s *statusSink) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusSink) WriteHeader(int)             {}

// TestWebhookOnLoopbackIsRefusedAtConnectTime: a webhook URL that got
// past the check when it was set (a name that resolved elsewhere then,
// rebound to 127.0.0.1 now: here a policy built without the check) is
// refused on the address dialled. The receiver gets nothing; the events
// stay pending with the refusal as their error.
func TestWebhookOnLoopbackIsRefusedAtConnectTime(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		rcv := newReceiver(t, clk.Now, func(int) int { return http.StatusNoContent })
		p := webhookPolicy(t, rcv.url(), "")
		p.Targets = netguard.Policy{} // as settings without the allowance would have it
		ob := newOutbox(t, b, p, clk)
		require.NoError(t, ob.Append(ctx, events("inside", 2)))
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Taken: 2, Failed: 2}, round)
		_, _, requests, _ := rcv.snapshot()
		require.Zero(t, requests)
		pending, _, err := ob.Pending(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, pending, 2)
		require.Contains(t, pending[0].LastError, "127.0.0.1 is loopback")
	})
}

// TestFailedDeliveriesAreCountedNotShouted: a webhook answering 503 to
// 200 requests in a row (within a minute of the outbox's clock) is one
// log line, and the Failures log counts 200; a minute later the next
// failure is a line that says how many were held back.
func TestFailedDeliveriesAreCountedNotShouted(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		rcv := newReceiver(t, clk.Now, func(int) int { return http.StatusServiceUnavailable })
		var logs strings.Builder
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))
		fails := ratelog.New(ratelog.Config{Logger: logger, Clock: clk})
		ob := outbox.New(b.Client, outbox.Config{Policy: webhookPolicy(t, rcv.url(), `,"batch_size":1,"max_attempts":1000`),
			Clock: clk, Jitter: func() float64 { return 1 }, Logger: logger, Failures: fails})
		require.NoError(t, ob.Append(ctx, events("down", 200)))
		for range 200 {
			round, err := ob.DeliverOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, round.Failed)
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return strings.Count(logs.String(), "webhook delivery failed")
		}
		require.Equal(t, 1, count())
		require.Equal(t, uint64(200), fails.Total(outbox.KindWebhookFailed))
		clk.Advance(time.Minute)
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, round.Failed)
		require.Equal(t, 2, count())
		mu.Lock()
		require.Contains(t, logs.String(), "unlogged=199")
		mu.Unlock()
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
