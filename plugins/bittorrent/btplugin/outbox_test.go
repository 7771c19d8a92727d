package btplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// TestOutboxDeliversToTheWebhookAndCountsInStats: with an "outbox"
// section naming a webhook, the plugin starts a deliverer; an appended
// event reaches a real receiver signed, and Stats carries the outbox's
// counts. Bad outbox settings refuse Configure.
func TestOutboxDeliversToTheWebhookAndCountsInStats(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		const secret = "plugin-webhook-secret-0123"
		var mu sync.Mutex
		got := map[string]int{}
		var redirecting atomic.Bool
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &httptest.Server{Listener: listener, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if redirecting.Load() {
				http.Redirect(w, r, "http://127.0.0.1:9/elsewhere", http.StatusTemporaryRedirect)
				return
			}
			payload, _ := io.ReadAll(r.Body)
			if outbox.VerifySignature([]byte(secret), r.Header.Get(outbox.SignatureHeader), payload, time.Now(), outbox.DefaultTolerance) != nil {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			var body outbox.WebhookBody
			require.NoError(t, json.Unmarshal(payload, &body))
			mu.Lock()
			for _, e := range body.Events {
				got[e.Key]++
			}
			mu.Unlock()
		})}}
		srv.Start()
		t.Cleanup(srv.Close)

		tr, _ := startTracker(t, b, fmt.Sprintf(`{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"",
			"outbox":{"webhook_url":%q,"webhook_secret":%q,"poll":"20ms","allow_private_targets":true}}`, srv.URL+"/hook", secret))
		ob := tr.Outbox()
		require.NotNil(t, ob)
		require.NoError(t, ob.Append(context.Background(), []outbox.Event{
			{Key: "notice:1", Kind: "notice-initial", Body: json.RawMessage(`{"user":"7"}`)},
			{Key: "notice:2", Kind: "notice-final", Body: json.RawMessage(`{"user":"8"}`)},
		}))
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return got["notice:1"] == 1 && got["notice:2"] == 1
		}, 10*time.Second, 10*time.Millisecond)
		// The receiver sees an event before the deliverer has read its
		// answer and marked it delivered: wait for the mark, not the POST.
		values := map[string]float64{}
		require.Eventually(t, func() bool {
			stats, err := tr.Stats(context.Background())
			require.NoError(t, err)
			for _, m := range stats.Metrics {
				values[m.Name] = m.Value
			}
			return values["outbox_delivered"] == 2
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, 2.0, values["outbox_appended"])
		require.Equal(t, 2.0, values["outbox_delivered"])
		require.Equal(t, 0.0, values["outbox_pending"])
		require.Contains(t, values, "outbox_dead")
		require.NotContains(t, values, "failures_total", "no failure, no series yet")

		// A webhook answering 307 fails every delivery: counted by kind.
		redirecting.Store(true)
		require.NoError(t, ob.Append(context.Background(), []outbox.Event{{Key: "notice:3", Kind: "notice-initial"}}))
		require.Eventually(t, func() bool {
			stats, err := tr.Stats(context.Background())
			require.NoError(t, err)
			for _, m := range stats.Metrics {
				if m.Name == "failures_total" && m.Labels["kind"] == outbox.KindWebhookFailed && m.Value >= 1 {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond)
		require.Contains(t, values, "outbox_failures")

		// Without the section there is no outbox and no outbox metrics.
		plain, _ := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":""}`)
		require.Nil(t, plain.Outbox())
	})
}

// TestOutboxSettingsAreChecked: a webhook that is not http(s) or a
// negative setting refuses Configure with the field named.
func TestOutboxSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for bad, says := range map[string]string{
			`{"outbox":{"webhook_url":"gopher://h/","webhook_secret":"0123456789abcdef"}}`:              "must be an http:// or https:// URL",
			`{"outbox":{"max_attempts":-2}}`:                                                            "max_attempts must not be negative",
			`{"outbox":{"webhook_url":"http://127.0.0.1:9/","webhook_secret":"0123456789abcdef"}}`:      "127.0.0.1 is loopback",
			`{"outbox":{"webhook_url":"http://169.254.169.254/h","webhook_secret":"0123456789abcdef"}}`: "169.254.169.254 is link-local",
			`{"scoring":{"enabled":true,"allowed_targets":["10.0.0.0/99"]}}`:                            "allowed target 0",
		} {
			p, err := btplugin.New(context.Background(), quiet)
			require.NoError(t, err)
			err = p.(*btplugin.Tracker).Configure(context.Background(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(bad)})
			require.ErrorContains(t, err, says, bad)
			require.NoError(t, p.(*btplugin.Tracker).Close(context.Background()))
		}
	})
}

// TestOutboxCountsReachTheHostsMetrics: run by the plugin host as
// `hoard serve` runs it, the outbox's counts come out of the host's
// Prometheus collector as hoard_bittorrent_outbox_*.
func TestOutboxCountsReachTheHostsMetrics(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		trackers := make(chan *btplugin.Tracker, 1)
		factory := func(ctx context.Context, l *slog.Logger) (plugins.Plugin, error) {
			p, err := btplugin.New(ctx, l)
			select {
			case trackers <- p.(*btplugin.Tracker):
			default:
			}
			return p, err
		}
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		h, err := pluginhost.NewHost(pluginhost.Options{
			Plugins: []pluginhost.Spec{{Name: "bittorrent", Settings: json.RawMessage(
				`{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","outbox":{}}`)}},
			Builtins: map[string]plugins.Factory{"bittorrent": factory},
			Redis:    b.Client, RedisURL: b.URL, Queues: pluginhost.EngineQueues(engine), Events: pluginhost.EngineEventLog(engine),
			Logger: quiet, HealthInterval: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, h.Start(ctx))
		t.Cleanup(func() { _ = h.Stop() })
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, h.WaitRunning(waitCtx, "bittorrent"))
		tr := <-trackers
		require.NoError(t, tr.Outbox().Append(ctx, []outbox.Event{
			{Key: "a", Kind: "reward"}, {Key: "b", Kind: "reward"}, {Key: "a", Kind: "reward"},
		}))

		registry := prometheus.NewRegistry()
		registry.MustRegister(h.Collector())
		gauge := func(name string) float64 {
			families, err := registry.Gather()
			require.NoError(t, err)
			for _, f := range families {
				if f.GetName() == name && len(f.GetMetric()) == 1 {
					return f.GetMetric()[0].GetGauge().GetValue()
				}
			}
			return -1
		}
		require.Eventually(t, func() bool { return gauge("hoard_bittorrent_outbox_pending") == 2 }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, 1.0, gauge("hoard_bittorrent_outbox_duplicates"))
		require.Equal(t, 0.0, gauge("hoard_bittorrent_outbox_dead"))
	})
}

// TestReaperNoticesReachTheSiteThroughTheOutbox: with the reaper and an
// outbox configured together, a reaper run's notice for an upload never
// seeded reaches a real webhook receiver, signed, once; a second run
// while the step is pending publishes nothing new.
func TestReaperNoticesReachTheSiteThroughTheOutbox(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		const secret = "reaper-webhook-secret-0123"
		var mu sync.Mutex
		var events []outbox.WebhookEvent
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &httptest.Server{Listener: listener, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			payload, _ := io.ReadAll(r.Body)
			if outbox.VerifySignature([]byte(secret), r.Header.Get(outbox.SignatureHeader), payload, time.Now(), outbox.DefaultTolerance) != nil {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			var body outbox.WebhookBody
			if json.Unmarshal(payload, &body) != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			mu.Lock()
			events = append(events, body.Events...)
			mu.Unlock()
		})}}
		srv.Start()
		t.Cleanup(srv.Close)

		tr, _ := startTracker(t, b, fmt.Sprintf(`{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"",
			"reaper":{"enabled":true,"period":"24h"},
			"outbox":{"webhook_url":%q,"webhook_secret":%q,"poll":"20ms","allow_private_targets":true}}`, srv.URL+"/hook", secret))
		ctx := t.Context()
		hash := bittorrent.InfoHash{0x4e, 'o', 'b'}
		require.NoError(t, tr.Store().Register(ctx, hash, swarm.Registration{ID: "31", Uploader: "u31",
			Created: time.Now().Add(-9 * time.Hour)}))
		for range 2 {
			res, err := tr.OnTick(ctx, plugins.Tick{Job: "reaper", Scheduled: time.Now(), At: time.Now()})
			require.NoError(t, err)
			require.LessOrEqual(t, len(res.Enqueue), 1)
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(events) >= 1
		}, 10*time.Second, 10*time.Millisecond)
		// Nothing else was stored, so nothing else can come: the second
		// run found the step pending and published no notice.
		require.Eventually(t, func() bool {
			c, err := tr.Outbox().Counts(ctx)
			return err == nil && c.Appended == 1 && c.Delivered == 1 && c.Pending == 0
		}, 10*time.Second, 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, events, 1, "one notice, delivered once")
		require.Equal(t, reaper.KindNotice, events[0].Kind)
		var notice reaper.NoticeBody
		require.NoError(t, json.Unmarshal(events[0].Body, &notice))
		require.Equal(t, "initial", notice.Step)
		require.Equal(t, "u31", notice.User)
	})
}
