package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The lean warrior client (`hoard-bench load --client raw`, the default):
// what seesaw-kit sends, written from buffers built once per warrior, over
// a plain net.Conn, the replies read by readRawResponse. Only the done
// body's item name changes between calls.

// rawTimeout is seesaw's (Tornado's) connect and request timeout.
const rawTimeout = 20 * time.Second

// warriorVersion and warriorUserAgent are what the generated warriors
// say they run (seesaw's User-Agent: ArchiveTeam Warrior/<seesaw version>
// <runner type> <warrior build>).
const (
	warriorVersion   = "20260101.01"
	warriorUserAgent = "ArchiveTeam Warrior/0.10.3 Standalone hoard-bench"
)

type rawWarrior struct {
	addr      string
	keepAlive bool
	conn      net.Conn
	br        *bufio.Reader
	// deadline is the connection's, moved when a call starts within
	// rawTimeout/2 of it: one deadline per connection or per ten seconds,
	// not two per call.
	deadline time.Time

	request                []byte // the whole request call, head and body
	doneHead               []byte // the done call's head up to Content-Length's value
	donePrefix, doneSuffix []byte // the done body around the item name
	out, body, name, enc   []byte // reused per call

}

// newRawWarrior builds one warrior's calls. base is hoard's URL (http,
// maybe with a path prefix).
func newRawWarrior(base *url.URL, project, downloader string, multi int, keepAlive bool) *rawWarrior {
	prefix := strings.TrimSuffix(base.Path, "/") + "/" + project
	requestPath := prefix + "/request"
	if multi > 1 {
		// seesaw appends /request to the multi URL's trailing slash.
		requestPath = prefix + "/multi=" + strconv.Itoa(multi) + "//request"
	}
	head := func(path string) string {
		h := "POST " + path + " HTTP/1.1\r\nHost: " + base.Host + "\r\nUser-Agent: " + warriorUserAgent +
			"\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n"
		if !keepAlive {
			h += "Connection: close\r\n"
		}
		return h + "Content-Length: "
	}
	// The bodies as Python's json.dumps writes seesaw's dicts.
	reqBody := `{"downloader": "` + downloader + `", "api_version": "2", "version": "` + warriorVersion + `"}`
	addr := base.Host
	if base.Port() == "" {
		addr = net.JoinHostPort(base.Hostname(), "80")
	}
	return &rawWarrior{
		addr:       addr,
		keepAlive:  keepAlive,
		br:         bufio.NewReaderSize(nil, 4096),
		request:    []byte(head(requestPath) + strconv.Itoa(len(reqBody)) + "\r\n\r\n" + reqBody),
		doneHead:   []byte(head(prefix + "/done")),
		donePrefix: []byte(`{"downloader": "` + downloader + `", "version": "` + warriorVersion + `", "item": `),
		doneSuffix: []byte(`, "bytes": {"data": 1000}, "id": {"pipeline_hash": "bench"}}`),
	}
}

// roundTrip claims (request) and completes (done) one item or batch and
// returns how many items it held.
func (w *rawWarrior) roundTrip(ctx context.Context, now time.Time) (int, error) {
	resp, err := w.call(ctx, w.request, now)
	if err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	switch resp.status {
	case 200:
	case 404:
		return 0, errDrained
	default:
		return 0, fmt.Errorf("request: HTTP %d: %s", resp.status, resp.body)
	}
	if w.name, err = jsonItemName(resp.body, w.name); err != nil {
		return 0, fmt.Errorf("request: %w", err)
	}
	w.enc = appendPythonJSONString(w.enc[:0], w.name)
	w.out = append(w.out[:0], w.doneHead...)
	w.out = strconv.AppendInt(w.out, int64(len(w.donePrefix)+len(w.enc)+len(w.doneSuffix)), 10)
	w.out = append(w.out, "\r\n\r\n"...)
	w.out = append(w.out, w.donePrefix...)
	w.out = append(w.out, w.enc...)
	w.out = append(w.out, w.doneSuffix...)
	if resp, err = w.call(ctx, w.out, now); err != nil {
		return 0, fmt.Errorf("done: %w", err)
	}
	// seesaw: 200 and the body stripped is OK.
	if resp.status != 200 || string(bytes.TrimSpace(resp.body)) != "OK" {
		return 0, fmt.Errorf("done: HTTP %d: %s", resp.status, resp.body)
	}
	return bytes.Count(w.name, []byte{0}) + 1, nil
}

// call sends msg and reads the answer, on the kept connection or a new
// one; the connection is closed after it unless both ends keep it.
func (w *rawWarrior) call(ctx context.Context, msg []byte, now time.Time) (rawResponse, error) {
	if w.conn == nil {
		// No TCP keep-alive probes: Tornado's sockets have none, and Go's
		// default sets them with four setsockopt calls per connection.
		d := net.Dialer{Timeout: rawTimeout, KeepAlive: -1}
		conn, err := d.DialContext(ctx, "tcp", w.addr)
		if err != nil {
			return rawResponse{}, err
		}
		w.conn, w.deadline = conn, time.Time{}
		w.br.Reset(conn)
	} else if w.br.Buffered() > 0 {
		// Nothing was asked: bytes here are an answer to no request.
		w.closeConn()
		return rawResponse{}, responseError("%d bytes after the last response", w.br.Buffered())
	}
	if now.Add(rawTimeout / 2).After(w.deadline) {
		w.deadline = now.Add(rawTimeout)
		if err := w.conn.SetDeadline(w.deadline); err != nil {
			w.closeConn()
			return rawResponse{}, err
		}
	}
	// Tornado's HTTP1Connection sends a request's head and its body with
	// two sends, TCP_NODELAY on (as Go's connections have it), so the
	// server may find the head without its body and read again: the
	// calls are written the same way.
	head := bytes.Index(msg, headEnd) + len(headEnd)
	for _, part := range [2][]byte{msg[:head], msg[head:]} {
		if len(part) == 0 {
			continue
		}
		if _, err := w.conn.Write(part); err != nil {
			w.closeConn()
			return rawResponse{}, err
		}
	}
	resp, body, err := readRawResponse(w.br, w.body)
	w.body = body
	if err != nil || resp.close || !w.keepAlive {
		w.closeConn()
	}
	return resp, err
}

var headEnd = []byte("\r\n\r\n")

func (w *rawWarrior) closeConn() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// loadWarriorsRaw is loadWarriors with the lean client: the same run, the
// same report.
func loadWarriorsRaw(ctx context.Context, o loadOptions) (loadReport, error) {
	base, err := url.Parse(o.url)
	if err != nil {
		return loadReport{}, fmt.Errorf("--url: %w", err)
	}
	if base.Scheme != "http" || base.Host == "" || base.RawQuery != "" || base.User != nil {
		return loadReport{}, fmt.Errorf("--url %q: the raw client speaks plain http://host[:port][/path] only", o.url)
	}
	calls := make([]roundTripFunc, o.warriors)
	for i := range calls {
		w := newRawWarrior(base, o.project, fmt.Sprintf("warrior%03d", i), o.multi, o.keepAlive)
		defer w.closeConn()
		calls[i] = w.roundTrip
	}
	return runWarriors(ctx, o.duration, calls)
}

// roundTripFunc is one warrior's request and done, started at now: the
// items it completed, or errDrained when the server had none left for it.
type roundTripFunc func(ctx context.Context, now time.Time) (int, error)

// runWarriors runs each warrior's round trips in a goroutine of its own
// until duration is up, the first warrior finds the queue empty, or the
// first error, and reports them: one run and one report whichever client
// makes the calls.
func runWarriors(ctx context.Context, duration time.Duration, warriors []roundTripFunc) (loadReport, error) {
	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	type tally struct {
		roundTrips, items int64
		latency           latencyHistogram
	}
	tallies := make([]tally, len(warriors))
	var (
		firstErr error
		errOnce  sync.Once
		drainAt  time.Duration
		drained  bool
		drainMu  sync.Mutex
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i, roundTrip := range warriors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[i]
			for runCtx.Err() == nil {
				t0 := time.Now()
				// The call in flight at the run's end (or when another
				// warrior finds the queue empty) is finished and counted,
				// not cut off: its claim was made and its done maybe too
				// (TestBothClientsAgreeAgainstARealHoard; a dial under
				// runCtx fails as a timeout just before runCtx reports its
				// end): ctx, not runCtx.
				n, err := roundTrip(ctx, t0)
				if errors.Is(err, errDrained) {
					// The first warrior to find the queue empty ends the
					// run for all: the rates cover the time until then.
					drainMu.Lock()
					if !drained {
						drained, drainAt = true, time.Since(start)
					}
					drainMu.Unlock()
					cancel()
					return
				}
				if err != nil {
					if runCtx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
						cancel()
					}
					return
				}
				t.latency.add(time.Since(t0))
				t.roundTrips++
				t.items += int64(n)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return loadReport{}, firstErr
	}
	elapsed := time.Since(start)
	if drained {
		elapsed = drainAt
	}
	var lat latencyHistogram
	report := loadReport{Seconds: elapsed.Seconds(), Drained: drained}
	for i := range tallies {
		report.RoundTrips += tallies[i].roundTrips
		report.Items += tallies[i].items
		lat.merge(&tallies[i].latency)
	}
	report.P50Millis, report.P99Millis = lat.quantile(0.5), lat.quantile(0.99)
	return report, nil
}
