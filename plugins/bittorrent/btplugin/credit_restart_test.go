package btplugin_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// announceLog is an HTTP proxy in front of the tracker that records what
// each announce reported: the figures a test checks the tracker's records
// against come from the client, not from constants.
type announceLog struct {
	tracker string // http://host:port
	mu      sync.Mutex
	seen    []loggedAnnounce
}

// loggedAnnounce is one announce as the client sent it. sent and answered
// bracket the time the tracker judged it by.
type loggedAnnounce struct {
	passkey, peerID, event     string
	uploaded, downloaded, left int64
	sent, answered             time.Time
	failed                     bool
}

func newAnnounceLog(t *testing.T, trackerAddr string) (*announceLog, string) {
	l := &announceLog{tracker: "http://" + trackerAddr}
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	return l, srv.URL
}

func (l *announceLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a := loggedAnnounce{passkey: strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0],
		peerID: q.Get("peer_id"), event: q.Get("event"), sent: time.Now()}
	a.uploaded, _ = strconv.ParseInt(q.Get("uploaded"), 10, 64)
	a.downloaded, _ = strconv.ParseInt(q.Get("downloaded"), 10, 64)
	a.left, _ = strconv.ParseInt(q.Get("left"), 10, 64)
	resp, err := http.Get(l.tracker + r.URL.RequestURI())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a.answered = time.Now()
	a.failed = bytes.Contains(body, []byte("failure reason"))
	l.mu.Lock()
	l.seen = append(l.seen, a)
	l.mu.Unlock()
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// of returns passkey's answered announces, in the order they were sent.
func (l *announceLog) of(passkey string) []loggedAnnounce {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedAnnounce
	for _, a := range l.seen {
		if a.passkey == passkey && !a.failed {
			out = append(out, a)
		}
	}
	return out
}

// announcedDelta is one announce's transfer since the previous one of
// its session, as the client's counters say.
type announcedDelta struct {
	up, down       int64
	sent, answered time.Time
}

// deltas splits announces into sessions, each opened by a started event
// or by counters going back (a client that restarts), and returns every
// announce's deltas within its session: what a tracker must credit.
func deltas(t *testing.T, announces []loggedAnnounce) []announcedDelta {
	t.Helper()
	var out []announcedDelta
	last := map[string]loggedAnnounce{}
	for _, a := range announces {
		prev, ok := last[a.peerID]
		if a.event == "started" || !ok || a.uploaded < prev.uploaded || a.downloaded < prev.downloaded {
			last[a.peerID] = a
			continue
		}
		d := announcedDelta{up: a.uploaded - prev.uploaded, down: a.downloaded - prev.downloaded, sent: a.sent, answered: a.answered}
		require.GreaterOrEqual(t, d.up, int64(0))
		require.GreaterOrEqual(t, d.down, int64(0))
		out = append(out, d)
		last[a.peerID] = a
	}
	return out
}

func sumDeltas(ds []announcedDelta) (up, down int64) {
	for _, d := range ds {
		up, down = up+d.up, down+d.down
	}
	return up, down
}

// siteCall makes one call of the plugin's admin API with the site's scope,
// as the host forwards a site's service account's, and returns the body.
func siteCall(t *testing.T, tr *btplugin.Tracker, method, path, body string) []byte {
	t.Helper()
	resp, err := tr.HandleRequest(t.Context(), plugins.Request{Method: method, Path: path, Body: []byte(body),
		Role: plugins.RoleScoped, Scopes: []string{"site"}, Actor: "site@test from 127.0.0.1"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status, "%s %s: %s", method, path, resp.Body)
	return resp.Body
}

// creditRig is a private tracker behind an announceLog, a whitelisted
// aria2c, and a seeder and a leecher user with a .torrent each.
type creditRig struct {
	tr                        *btplugin.Tracker
	store                     *swarm.Store
	log                       *announceLog
	hash                      bittorrent.InfoHash
	payload                   []byte
	dir, seedDir, leechDir    string
	seedTorrent, leechTorrent string
	seedKey, leechKey         string
}

func newCreditRig(t *testing.T, b redistest.Backend, size int) *creditRig {
	t.Helper()
	tr, addrs := startTracker(t, b, `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m"}`)
	ctx := context.Background()
	r := &creditRig{tr: tr, store: tr.Store(), dir: t.TempDir(), seedKey: strings.Repeat("s", 32), leechKey: strings.Repeat("l", 32)}
	var proxy string
	r.log, proxy = newAnnounceLog(t, addrs["http"])
	require.NoError(t, r.store.AddUser(ctx, r.seedKey, "seeder"))
	require.NoError(t, r.store.AddUser(ctx, r.leechKey, "leecher"))
	require.NoError(t, r.store.AddClient(ctx, "A2-", "aria2"))
	r.leechDir = filepath.Join(r.dir, "leech")
	r.seedDir, r.payload = writeSeedPayload(t, r.dir, size)
	r.seedTorrent = passkeyTorrent(t, r.dir, r.seedDir, proxy, r.seedKey)
	r.leechTorrent = passkeyTorrent(t, r.dir, r.seedDir, proxy, r.leechKey)
	r.hash = infoHashOf(t, r.seedTorrent)
	require.NoError(t, r.store.RegisterTorrent(ctx, r.hash, "31"))
	return r
}

// writeSeedPayload writes size random bytes to dir/seed/payload.bin, the
// file a seeder shares, and returns the seed directory and the bytes.
func writeSeedPayload(t *testing.T, dir string, size int) (string, []byte) {
	t.Helper()
	seedDir := filepath.Join(dir, "seed")
	require.NoError(t, os.MkdirAll(seedDir, 0o755))
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	require.NoError(t, os.WriteFile(filepath.Join(seedDir, "payload.bin"), payload, 0o644))
	return seedDir, payload
}

// passkeyTorrent makes dir/<passkey's first letter>.torrent of
// seedDir/payload.bin, announcing to base/<passkey>/announce: one user's
// copy of the torrent (the info-hash is the same for every passkey).
func passkeyTorrent(t *testing.T, dir, seedDir, base, passkey string) string {
	t.Helper()
	path := filepath.Join(dir, passkey[:1]+".torrent")
	out, err := exec.Command("mktorrent", "-a", base+"/"+passkey+"/announce", "-l", "16",
		"-o", path, filepath.Join(seedDir, "payload.bin")).CombinedOutput()
	require.NoError(t, err, string(out))
	return path
}

// startSeeder runs an aria2c seeder whose upload is capped, so the
// download takes several of the leecher's announces; the returned stop
// interrupts it, and it says stopped with its final counters.
func (r *creditRig) startSeeder(t *testing.T, ctx context.Context, limit string) (stop func()) {
	t.Helper()
	seeder := exec.CommandContext(ctx, "aria2c", append(aria2Flags(r.seedDir, freePort(t)),
		"--seed-ratio=0.0", "--max-upload-limit="+limit, r.seedTorrent)...)
	out := &lockedBuffer{}
	seeder.Stdout, seeder.Stderr = out, out
	require.NoError(t, seeder.Start())
	waitFor(t, "the seeder's announce", func() bool {
		info, err := r.store.Torrent(ctx, r.hash)
		return err == nil && info.Seeders == 1
	})
	var once sync.Once
	stop = func() {
		once.Do(func() { _ = seeder.Process.Signal(os.Interrupt); _ = seeder.Wait() })
	}
	t.Cleanup(stop)
	return stop
}

// leecher is the aria2c command of the leecher: it announces every second
// (--bt-tracker-interval overrides the tracker's interval), with a fixed
// peer_id and port, so a restarted leecher is the same peer to the tracker,
// and saves its progress every second, so a restart resumes.
func (r *creditRig) leecher(ctx context.Context, port int) *exec.Cmd {
	return exec.CommandContext(ctx, "aria2c", append(aria2Flags(r.leechDir, port),
		"--seed-time=0", "--bt-tracker-interval=1", "--peer-id-prefix=A2-1-36-0-leecher001",
		"--auto-save-interval=1", r.leechTorrent)...)
}

// settled waits until the user's record holds the announced totals (a
// re-announce may be written behind) and returns it.
func (r *creditRig) settled(t *testing.T, user string, up, down int64) swarm.UserTorrent {
	t.Helper()
	var rec swarm.UserTorrent
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := r.store.UserOnTorrent(context.Background(), r.hash, user)
		if err == nil {
			rec = got
			if rec.Uploaded == up && rec.Downloaded == down {
				return rec
			}
		}
		if time.Now().After(deadline) {
			require.Equal(t, [2]int64{up, down}, [2]int64{rec.Uploaded, rec.Downloaded},
				"%s's record never held what its client announced: %+v", user, rec)
		}
		time.Sleep(50 * time.Millisecond) // the write-behind is wall-clock time
	}
}

// userTotals reads a user's totals over all torrents as the site does,
// once they reach want (each frontend flushes them within a second).
func (r *creditRig) userTotals(t *testing.T, user string, want [4]int64) {
	t.Helper()
	var got [4]int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		var u struct {
			Uploaded     int64 `json:"uploaded"`
			Downloaded   int64 `json:"downloaded"`
			UpCredited   int64 `json:"up_credited"`
			DownCredited int64 `json:"down_credited"`
		}
		require.NoError(t, json.Unmarshal(siteCall(t, r.tr, http.MethodGet, "/users/by-id/"+user, ""), &u))
		got = [4]int64{u.Uploaded, u.Downloaded, u.UpCredited, u.DownCredited}
		if got == want || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the flush interval is wall-clock time
	}
	require.Equal(t, want, got, "%s's totals (uploaded, downloaded, up_credited, down_credited) as GET users/by-id answers them", user)
}

// Issue 28.1 with real clients: a site-wide freeleech window that the
// site sets through its admin API while aria2c is downloading. What the
// leecher announced before the window's start is credited, what it
// announced after it is not; the seeder's upload is credited in full.
// The expected figures are the deltas of aria2c's own announces, recorded
// by a proxy in front of the tracker.
func TestAria2FreeleechWindowOpensMidDownload(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newCreditRig(t, b, 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stopSeeder := r.startSeeder(t, ctx, "96K")
		leecher := r.leecher(ctx, freePort(t))
		leechOut := &lockedBuffer{}
		leecher.Stdout, leecher.Stderr = leechOut, leechOut
		require.NoError(t, leecher.Start())
		done := make(chan error, 1)
		go func() { done <- leecher.Wait() }()

		// Right after a re-announce that reported download, open the
		// window 400 ms ahead: the leecher's next announce is a second
		// after its last, so none is answered near the window's start,
		// and the window is in place before it starts.
		var start time.Time
		waitFor(t, "a re-announce with download", func() bool {
			ds := deltas(t, r.log.of(r.leechKey))
			if len(ds) == 0 || ds[len(ds)-1].down == 0 || time.Since(ds[len(ds)-1].answered) > 200*time.Millisecond {
				return false
			}
			start = ds[len(ds)-1].answered.Add(400 * time.Millisecond).Truncate(time.Millisecond)
			return true
		})
		siteCall(t, r.tr, http.MethodPut, "/credit/windows/holiday",
			fmt.Sprintf(`{"kind":"freeleech","start":%q,"end":%q}`, start.Format(time.RFC3339Nano), start.Add(time.Hour).Format(time.RFC3339Nano)))
		require.True(t, time.Now().Before(start), "the window was set after its own start (the machine is too slow for this test)")

		select {
		case err := <-done:
			require.NoError(t, err, leechOut.String())
		case <-ctx.Done():
			t.Fatalf("the leecher did not finish: %s", leechOut.String())
		}
		got, err := os.ReadFile(filepath.Join(r.leechDir, "payload.bin"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(r.payload, got))
		stopSeeder()

		var before, after int64
		for _, d := range deltas(t, r.log.of(r.leechKey)) {
			switch {
			case !d.answered.After(start):
				before += d.down
			case !d.sent.Before(start):
				after += d.down
			default:
				t.Fatalf("an announce straddled the window's start %s: sent %s, answered %s", start, d.sent, d.answered)
			}
		}
		require.Positive(t, before, "downloaded before the window")
		require.Positive(t, after, "downloaded in the window")
		leechUp, _ := sumDeltas(deltas(t, r.log.of(r.leechKey)))
		l := r.settled(t, "leecher", leechUp, before+after)
		require.Equal(t, before, l.DownCredited, "only what was announced before the window's start is credited")
		require.Equal(t, leechUp, l.UpCredited)
		seedUp, seedDown := sumDeltas(deltas(t, r.log.of(r.seedKey)))
		require.Positive(t, seedUp)
		s := r.settled(t, "seeder", seedUp, seedDown)
		require.Equal(t, seedUp, s.UpCredited, "a freeleech window leaves upload as it is")
		r.userTotals(t, "leecher", [4]int64{leechUp, before + after, leechUp, before})
		r.userTotals(t, "seeder", [4]int64{seedUp, seedDown, seedUp, seedDown})
		t.Logf("leecher: %d bytes announced before the window (credited %d), %d in it; seeder uploaded %d",
			before, l.DownCredited, after, s.Uploaded)
	})
}

// Issue 28.1 with real clients: the aria2c leecher is killed (SIGKILL, no
// stopped announce) mid-download and started again on its partial file,
// with the same peer_id and port. Its counters start again from 0 with a
// started event; the tracker opens a new session, so no delta is negative
// or counted twice: the record holds exactly the sum of what each session
// announced.
func TestAria2ClientRestartedMidDownload(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		r := newCreditRig(t, b, 1<<20)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stopSeeder := r.startSeeder(t, ctx, "128K")
		port := freePort(t)
		first := r.leecher(ctx, port)
		require.NoError(t, first.Start())
		waitFor(t, "two re-announces with download", func() bool {
			n := 0
			for _, d := range deltas(t, r.log.of(r.leechKey)) {
				if d.down > 0 {
					n++
				}
			}
			return n >= 2
		})
		require.NoError(t, first.Process.Signal(syscall.SIGKILL))
		_ = first.Wait()

		second := r.leecher(ctx, port)
		out, err := second.CombinedOutput()
		require.NoError(t, err, string(out))
		got, err := os.ReadFile(filepath.Join(r.leechDir, "payload.bin"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(r.payload, got))
		stopSeeder()

		// The restarted client's first announce is the second started
		// (an announce of the killed one may have been answered after
		// the kill).
		announces := r.log.of(r.leechKey)
		require.Equal(t, "started", announces[0].event)
		killedAt := slices.IndexFunc(announces[1:], func(a loggedAnnounce) bool { return a.event == "started" }) + 1
		require.Positive(t, killedAt, "the restarted client said started")
		_, firstDown := sumDeltas(deltas(t, announces[:killedAt]))
		require.Less(t, firstDown, int64(len(r.payload)), "killed mid-download")
		restart := announces[killedAt]
		require.Equal(t, announces[0].peerID, restart.peerID, "the same peer to the tracker")
		require.Less(t, restart.downloaded, announces[killedAt-1].downloaded, "the restarted client's counters went back")
		up, down := sumDeltas(deltas(t, announces))
		require.Greater(t, down, firstDown, "the second session downloaded the rest")
		l := r.settled(t, "leecher", up, down)
		require.Equal(t, down, l.DownCredited)
		require.Equal(t, up, l.UpCredited)
		seedUp, seedDown := sumDeltas(deltas(t, r.log.of(r.seedKey)))
		s := r.settled(t, "seeder", seedUp, seedDown)
		require.Equal(t, seedUp, s.UpCredited)
		r.userTotals(t, "leecher", [4]int64{up, down, up, down})
		t.Logf("leecher: first session announced %d bytes, both %d (file %d); seeder uploaded %d",
			firstDown, down, len(r.payload), s.Uploaded)
	})
}
