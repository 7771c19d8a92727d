package outbox_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

const testSecret = "a-webhook-secret-for-tests"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// receiver is a real webhook on 127.0.0.1: it verifies every request's
// signature, answers what behave says for the n-th request (a status, or
// hang until the request is abandoned), and records the keys it received
// and those it accepted (answered 2xx).
type receiver struct {
	t      testing.TB
	server *httptest.Server
	now    func() time.Time
	behave func(n int) int // status; hang for a negative value

	mu        sync.Mutex
	requests  int
	received  map[string]int
	accepted  map[string]int
	bodies    map[string]json.RawMessage
	badSigs   int
	firstSeen chan struct{}
}

const hang = -1

func newReceiver(t testing.TB, now func() time.Time, behave func(n int) int) *receiver {
	r := &receiver{t: t, now: now, behave: behave, received: map[string]int{}, accepted: map[string]int{},
		bodies: map[string]json.RawMessage{}, firstSeen: make(chan struct{})}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.server = &httptest.Server{Listener: listener, Config: &http.Server{Handler: http.HandlerFunc(r.serve)}}
	r.server.Start()
	t.Cleanup(r.server.Close)
	return r
}

func (r *receiver) url() string { return r.server.URL + "/hook" }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	payload, err := io.ReadAll(req.Body)
	if err != nil {
		return
	}
	if err := outbox.VerifySignature([]byte(testSecret), req.Header.Get(outbox.SignatureHeader), payload, r.now(), outbox.DefaultTolerance); err != nil {
		r.mu.Lock()
		r.badSigs++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var body outbox.WebhookBody
	if err := json.Unmarshal(payload, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	n := r.requests
	for _, e := range body.Events {
		r.received[e.Key]++
		r.bodies[e.Key] = e.Body
	}
	if n == 1 {
		close(r.firstSeen)
	}
	r.mu.Unlock()
	status := r.behave(n)
	if status == hang {
		<-req.Context().Done()
		return
	}
	if status/100 == 2 {
		r.mu.Lock()
		for _, e := range body.Events {
			r.accepted[e.Key]++
		}
		r.mu.Unlock()
	}
	w.WriteHeader(status)
}

func (r *receiver) snapshot() (received, accepted map[string]int, requests, badSigs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	received, accepted = map[string]int{}, map[string]int{}
	for k, v := range r.received {
		received[k] = v
	}
	for k, v := range r.accepted {
		accepted[k] = v
	}
	return received, accepted, r.requests, r.badSigs
}

func policy(t testing.TB, settings string) outbox.Policy {
	t.Helper()
	_, p, err := outbox.ParseSettings([]byte(settings))
	require.NoError(t, err)
	return p
}

func webhookPolicy(t testing.TB, url, extra string) outbox.Policy {
	t.Helper()
	// The receivers are on 127.0.0.1, which the operator must allow.
	return policy(t, fmt.Sprintf(`{"webhook_url":%q,"webhook_secret":%q,"allow_private_targets":true%s}`, url, testSecret, extra))
}

func newOutbox(t *testing.T, b redistest.Backend, p outbox.Policy, clk clock.Clock) *outbox.Outbox {
	t.Helper()
	ob := outbox.New(b.Client, outbox.Config{Policy: p, Clock: clk, Jitter: func() float64 { return 1 }, Logger: quiet})
	t.Cleanup(ob.Stop)
	return ob
}

func events(prefix string, n int) []outbox.Event {
	out := make([]outbox.Event, n)
	for i := range out {
		out[i] = outbox.Event{Key: fmt.Sprintf("%s-%d", prefix, i), Kind: "notice-initial",
			Body: json.RawMessage(fmt.Sprintf(`{"user":"u%d","torrents":[%d]}`, i%7, i))}
	}
	return out
}

func start() time.Time { return time.Now().Truncate(time.Second) }
