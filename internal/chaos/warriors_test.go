package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The chaos project: reclaim on with a short TTL, so a dead warrior's
// claims (and claims whose reply died with a frontend) come back within
// seconds of real time.
//
// max_claims is low, so that items claimed by dying, releasing and
// killed warriors reach it and go to failed during a run: the check then
// proves failed is one of the places, counted once, never beside another.
const (
	projectSlug = "chaos"
	reclaimTTL  = 2 * time.Second
	maxClaims   = 3
)

// warriorPlan is what one warrior does. The mix is issue 15's: half
// multi=1 and half multi=10, every warrior sometimes releasing, and a
// quarter of them "dying" mid-claim now and then (claiming and never
// reporting, as a killed warrior does).
type warriorPlan struct {
	nick     string
	frontend int
	multi    int
	// releaseRate, dieRate and failRate (a failure report, POST
	// /<slug>/fail) are chances per claim.
	releaseRate, dieRate, failRate float64
	// firstFailAt is the claim (counting from 1) whose items include the
	// warrior's first failure report, whatever failRate draws: at 1% a
	// claim, a short run could otherwise end with no report at all, and
	// the failed path would go untested by chance (CI saw it once).
	firstFailAt int
	// work is about the mean time from one claim to the next: a pause of
	// up to half of it before claiming, then a quarter to all of it spent
	// on the items before reporting them.
	work time.Duration
}

func warriorPlans(count, frontends int, work time.Duration) []warriorPlan {
	plans := make([]warriorPlan, count)
	for i := range plans {
		plans[i] = warriorPlan{
			nick:        fmt.Sprintf("chaos-w%02d", i),
			frontend:    i % frontends,
			multi:       1,
			releaseRate: 0.03,
			failRate:    0.01,
			firstFailAt: 2 + i%5,
			work:        work,
		}
		if i >= count/2 {
			plans[i].multi = 10
		}
		if i%4 == 3 {
			plans[i].dieRate = 0.08
		}
	}
	return plans
}

// ledger is what the warriors were told, for the checker: which dones
// were acknowledged and when.
type ledger struct {
	mu    sync.Mutex
	acked map[string]time.Time // item -> first "OK" for it

	claims, claimedItems, dones, releases, deaths, refusals, failReports atomic.Int64
	failures                                                             atomic.Int64 // transport errors and 5xx
	// claimsUnanswered are claim requests that got no answer (the
	// connection broke): hoard may have claimed items for them that no
	// warrior will ever report, which only the reclaim brings back.
	claimsUnanswered atomic.Int64
}

func newLedger() *ledger { return &ledger{acked: map[string]time.Time{}} }

func (l *ledger) ack(items []string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, item := range items {
		if _, seen := l.acked[item]; !seen {
			l.acked[item] = at
		}
	}
}

// ackedBefore returns the items acknowledged before t, with their times.
func (l *ledger) ackedBefore(t time.Time) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.acked))
	for item, at := range l.acked {
		if at.Before(t) {
			out[item] = at
		}
	}
	return out
}

// successes records, per frontend, each warrior request that got a real
// answer from hoard (and so from Redis), with the time the request was
// sent: recovery after a kill is the first such request sent after it.
type successes struct {
	mu    sync.Mutex
	waits []*recoveryWait
}

type recoveryWait struct {
	frontend int // -1: any frontend
	after    time.Time
	done     chan time.Time
}

// waitFor registers a wait for a request to frontend (or any, -1) sent
// after t that succeeds.
func (s *successes) waitFor(frontend int, t time.Time) <-chan time.Time {
	w := &recoveryWait{frontend: frontend, after: t, done: make(chan time.Time, 1)}
	s.mu.Lock()
	s.waits = append(s.waits, w)
	s.mu.Unlock()
	return w.done
}

func (s *successes) record(frontend int, sent, answered time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.waits[:0]
	for _, w := range s.waits {
		if (w.frontend == -1 || w.frontend == frontend) && sent.After(w.after) {
			w.done <- answered
			continue
		}
		kept = append(kept, w)
	}
	s.waits = kept
}

// warrior is one simulated seesaw client.
type warrior struct {
	plan      warriorPlan
	base      string
	http      *http.Client
	rng       *rand.Rand
	ledger    *ledger
	successes *successes
	// draining: no more work time, deaths or releases; claim until told
	// to stop.
	draining *atomic.Bool
	stop     *atomic.Bool
	// claimsSeen counts this warrior's claims that handed out items;
	// failOwed is a failure report decided and not yet answered with a
	// 200 (a kill or a stall ate it): the next claim's items carry it.
	claimsSeen int
	failOwed   bool
}

// run claims, works and reports until stop is set. It never cancels a
// request in flight: a claim cut off by the test would strand an item
// that hoard did nothing wrong with.
func (w *warrior) run() {
	for !w.stop.Load() {
		// A pause between items, as a pipeline has, so that at any moment
		// some warriors are about to claim while others are about to
		// report: a kill or a stall then catches both kinds of request.
		if !w.draining.Load() && w.plan.work > 0 {
			time.Sleep(time.Duration(float64(w.plan.work) * 0.5 * w.rng.Float64()))
		}
		items, ok := w.claim()
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		draining := w.draining.Load()
		if !draining && w.rng.Float64() < w.plan.dieRate {
			w.ledger.deaths.Add(1)
			continue // dead mid-claim: never reported; the reclaim brings them back
		}
		if !draining && w.plan.work > 0 {
			time.Sleep(time.Duration(float64(w.plan.work) * (0.25 + 0.75*w.rng.Float64())))
		}
		if !draining && w.rng.Float64() < w.plan.releaseRate {
			cut := 1 + w.rng.IntN(len(items))
			if w.release(items[:cut]) {
				items = items[cut:]
			}
		}
		w.claimsSeen++
		if w.claimsSeen == w.plan.firstFailAt || w.rng.Float64() < w.plan.failRate {
			w.failOwed = true
		}
		if !draining && len(items) > 0 && w.failOwed {
			if w.fail(items[:1]) {
				items = items[1:]
				w.failOwed = false
			}
		}
		if len(items) > 0 {
			w.done(items)
		}
	}
}

// post sends one warrior call. It returns the status and body, or ok
// false for a transport error or a 5xx, which it counts as failures.
func (w *warrior) post(path string, body any) (status int, reply []byte, ok bool) {
	raw, _ := json.Marshal(body)
	sent := time.Now()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, w.base+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ArchiveTeam Warrior/0.10.3 chaos")
	resp, err := w.http.Do(req)
	if err != nil {
		if os.Getenv("HOARD_CHAOS_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "DEBUG %s %s %s after %s: %v\n", time.Now().Format("15:04:05.000"), w.plan.nick, path, time.Since(sent), err)
		}
		w.ledger.failures.Add(1)
		return 0, nil, false
	}
	reply, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode >= 500 {
		w.ledger.failures.Add(1)
		return resp.StatusCode, reply, false
	}
	w.successes.record(w.plan.frontend, sent, time.Now())
	return resp.StatusCode, reply, true
}

// claim asks for up to multi items; ok is false with nothing handed out.
func (w *warrior) claim() ([]string, bool) {
	path := "/" + projectSlug + "/request"
	if w.plan.multi > 1 {
		path = fmt.Sprintf("/%s/multi=%d//request", projectSlug, w.plan.multi)
	}
	status, reply, ok := w.post(path, map[string]string{"downloader": w.plan.nick, "api_version": "2", "version": "chaos"})
	if !ok && status == 0 {
		w.ledger.claimsUnanswered.Add(1)
	}
	if !ok || status != http.StatusOK {
		return nil, false
	}
	var body struct {
		ItemName string `json:"item_name"`
	}
	if err := json.Unmarshal(reply, &body); err != nil || body.ItemName == "" {
		return nil, false
	}
	items := strings.Split(body.ItemName, "\x00")
	w.ledger.claims.Add(1)
	w.ledger.claimedItems.Add(int64(len(items)))
	return items, true
}

// done reports items until hoard gives a definite answer, as seesaw
// does. A refusal (409: hoard no longer has them out with this warrior,
// as after a claim Redis lost) is split item by item, and an item refused
// on its own is dropped: its next claimant completes it.
func (w *warrior) done(items []string) {
	body := map[string]any{"downloader": w.plan.nick, "version": "chaos", "item": strings.Join(items, "\x00"),
		"bytes": map[string]int{"data": 1000 * len(items)}}
	for !w.stop.Load() {
		status, reply, ok := w.post("/"+projectSlug+"/done", body)
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if status == http.StatusOK && strings.TrimSpace(string(reply)) == "OK" {
			w.ledger.dones.Add(1)
			w.ledger.ack(items, time.Now())
			return
		}
		w.ledger.refusals.Add(1)
		if len(items) > 1 {
			for _, item := range items {
				w.done([]string{item})
			}
		}
		return
	}
}

// release gives items back; false when hoard did not take them.
func (w *warrior) release(items []string) bool {
	status, _, ok := w.post("/"+projectSlug+"/release",
		map[string]string{"downloader": w.plan.nick, "item": strings.Join(items, "\x00")})
	if ok && status == http.StatusOK {
		w.ledger.releases.Add(1)
		return true
	}
	return false
}

// fail reports an item failed; false when hoard did not take the report.
func (w *warrior) fail(items []string) bool {
	status, _, ok := w.post("/"+projectSlug+"/fail",
		map[string]string{"downloader": w.plan.nick, "item": strings.Join(items, "\x00"), "reason": "chaos"})
	if ok && status == http.StatusOK {
		w.ledger.failReports.Add(1)
		return true
	}
	return false
}
