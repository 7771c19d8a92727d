package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

// loadReport is what `hoard-bench load` prints, one JSON line: the load
// generator runs in its own process so the server's CPU is the server's
// alone, as with an outside client.
type loadReport struct {
	RoundTrips int64   `json:"round_trips"`
	Items      int64   `json:"items"`
	Seconds    float64 `json:"seconds"`
	// P50 and P99 are round-trip (request + done) or batch latencies.
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
	// Drained: the queue ran dry before the duration was up; the rates
	// cover the time until then.
	Drained bool `json:"drained"`
	// cpu is the load generator process's user + system CPU, read by
	// warrior-path from its exit status: what the client side cost.
	cpu time.Duration
}

type loadOptions struct {
	url       string
	project   string
	mode      string
	warriors  int
	multi     int
	duration  time.Duration
	keepAlive bool
	secret    string
	tag       string
	client    string
	profile   string
}

// benchLoadCommand is the load generator `hoard-bench warrior-path` starts
// as a subprocess; it can also be pointed at any hoard by hand.
func benchLoadCommand() *cobra.Command {
	var o loadOptions
	cmd := &cobra.Command{
		Use:   "load",
		Short: "An outside load generator against a running hoard: warriors (request + done) or backfeed senders; prints one JSON line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.url == "" || o.project == "" || o.warriors < 1 || o.multi < 1 || o.duration <= 0 {
				return errors.New("--url, --project, and positive --warriors, --multi and --duration are needed")
			}
			if o.profile != "" {
				file, err := os.Create(o.profile)
				if err != nil {
					return err
				}
				defer file.Close()
				if err := pprof.StartCPUProfile(file); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			var report loadReport
			var err error
			switch o.mode {
			case "warriors":
				switch o.client {
				case clientRaw:
					report, err = loadWarriorsRaw(cmd.Context(), o)
				case clientNetHTTP:
					report, err = loadWarriors(cmd.Context(), o)
				default:
					return fmt.Errorf("--client %q: %s or %s", o.client, clientRaw, clientNetHTTP)
				}
			case "backfeed":
				report, err = loadBackfeed(cmd.Context(), o)
			default:
				return fmt.Errorf("--mode %q: warriors or backfeed", o.mode)
			}
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(report)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.url, "url", "", "hoard's base URL, e.g. http://127.0.0.1:8080")
	f.StringVar(&o.project, "project", "", "project slug")
	f.StringVar(&o.mode, "mode", "warriors", "warriors or backfeed")
	f.IntVar(&o.warriors, "warriors", 32, "concurrent warriors (or backfeed senders)")
	f.IntVar(&o.multi, "multi", 1, "items per request (multi=N), or items per backfeed batch")
	f.DurationVar(&o.duration, "duration", 20*time.Second, "length of the run")
	f.BoolVar(&o.keepAlive, "keep-alive", false, "reuse connections (seesaw's Tornado client sends Connection: close)")
	f.StringVar(&o.secret, "secret", "", "the project's backfeed secret (--mode backfeed)")
	f.StringVar(&o.tag, "tag", "", "makes backfeed items distinct between runs on one project")
	f.StringVar(&o.profile, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	f.StringVar(&o.client, "client", clientRaw, "the warriors' HTTP client: "+clientRaw+" (seesaw's calls from prebuilt buffers over a plain connection, strict reply parsing) or "+clientNetHTTP+" (Go's client, encoding/json); backfeed always uses net/http")
	return cmd
}

// The warrior clients `hoard-bench load --client` can use.
const (
	clientRaw     = "raw"
	clientNetHTTP = "net/http"
)

// latencies collects per-call durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) quantile(q float64) float64 {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return float64(l.d[int(q*float64(len(l.d)-1))]) / float64(time.Millisecond)
}

// errDrained: the server has no items left for this warrior.
var errDrained = errors.New("drained")

func loadWarriors(ctx context.Context, o loadOptions) (loadReport, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: o.warriors, DisableKeepAlives: !o.keepAlive}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	defer transport.CloseIdleConnections()
	requestURL := o.url + "/" + o.project + "/request"
	if o.multi > 1 {
		requestURL = fmt.Sprintf("%s/%s/multi=%d//request", o.url, o.project, o.multi)
	}
	doneURL := o.url + "/" + o.project + "/done"
	calls := make([]roundTripFunc, o.warriors)
	for w := range calls {
		downloader := fmt.Sprintf("warrior%03d", w)
		reqBody := []byte(`{"downloader":"` + downloader + `","api_version":"2","version":"20260101.01"}`)
		calls[w] = func(ctx context.Context, _ time.Time) (int, error) {
			return loadRoundTrip(ctx, client, requestURL, doneURL, downloader, reqBody)
		}
	}
	return runWarriors(ctx, o.duration, calls)
}

func loadRoundTrip(ctx context.Context, client *http.Client, requestURL, doneURL, downloader string, reqBody []byte) (int, error) {
	body, status, err := post(ctx, client, requestURL, reqBody)
	if err != nil {
		return 0, err
	}
	if status == http.StatusNotFound {
		return 0, errDrained
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("request: HTTP %d: %s", status, body)
	}
	var got struct {
		ItemName string `json:"item_name"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		return 0, fmt.Errorf("request reply: %w", err)
	}
	done, _ := json.Marshal(map[string]any{
		"downloader": downloader, "version": "20260101.01", "item": got.ItemName,
		"bytes": map[string]int{"data": 1000}, "id": map[string]string{"pipeline_hash": "bench"},
	})
	body, status, err = post(ctx, client, doneURL, done)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK || strings.TrimSpace(string(body)) != "OK" {
		return 0, fmt.Errorf("done: HTTP %d: %s", status, body)
	}
	return strings.Count(got.ItemName, "\x00") + 1, nil
}

// loadBackfeed: senders POST NUL-joined batches of distinct items (with
// the trailing NUL, as the grab scripts do), Connection: close as LuaSocket.
func loadBackfeed(ctx context.Context, o loadOptions) (loadReport, error) {
	url := o.url + "/backfeed/legacy/" + o.project + "-" + o.secret
	transport := &http.Transport{MaxIdleConnsPerHost: o.warriors, DisableKeepAlives: !o.keepAlive}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	defer transport.CloseIdleConnections()
	runCtx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var items, batches atomic.Int64
	var lat latencies
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for s := 0; s < o.warriors; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { lat.add(mine) }()
			var body bytes.Buffer
			for n := 0; runCtx.Err() == nil; n++ {
				body.Reset()
				for i := 0; i < o.multi; i++ {
					fmt.Fprintf(&body, "url:https://example.org/%s/s%d/b%d/i%d\x00", o.tag, s, n, i)
				}
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(runCtx, http.MethodPost, url, bytes.NewReader(body.Bytes()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := client.Do(req)
				if err != nil {
					if runCtx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var got struct {
					StatusCode int `json:"status_code"`
					New        int `json:"new"`
				}
				if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &got) != nil || got.StatusCode != 200 {
					once.Do(func() { firstErr = fmt.Errorf("backfeed: HTTP %d: %s", resp.StatusCode, raw) })
					return
				}
				mine = append(mine, time.Since(t0))
				batches.Add(1)
				items.Add(int64(got.New))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return loadReport{}, firstErr
	}
	return loadReport{RoundTrips: batches.Load(), Items: items.Load(), Seconds: time.Since(start).Seconds(),
		P50Millis: lat.quantile(0.5), P99Millis: lat.quantile(0.99)}, nil
}
