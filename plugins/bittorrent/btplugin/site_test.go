package btplugin_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// aria2Refusal makes a torrent announced to announceURL, runs aria2c on
// it (aria2Log) and returns the log once it holds want.
func aria2Refusal(t *testing.T, announceURL, want string) string {
	t.Helper()
	dir := t.TempDir()
	return aria2Log(t, dir, writeTorrentFor(t, dir, announceURL), want)
}

// aria2Log runs aria2c on torrent with a log at info level and returns
// the log once it holds want (aria2c retries a failing tracker for ever,
// so it is stopped then).
func aria2Log(t *testing.T, dir, torrent, want string) string {
	t.Helper()
	logPath := filepath.Join(dir, "aria2.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leech := filepath.Join(dir, "leech")
	cmd := exec.CommandContext(ctx, "aria2c", append(aria2Flags(leech, freePort(t)),
		"--log="+logPath, "--log-level=info", "--seed-time=0", torrent)...)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, _ := os.ReadFile(logPath)
		if log := string(raw); strings.Contains(log, want) {
			return log
		} else if time.Now().After(deadline) {
			t.Fatalf("aria2c did not log %q in 30s; its log:\n%s", want, log)
		}
		time.Sleep(100 * time.Millisecond) // polls a child's log file; no clock to inject
	}
}

// Issue 28.4's proof: a torrent the site deleted with a reason, announced
// by aria2c over HTTP and UDP, and the reason in aria2c's log.
func TestAria2LogsTheDeletedTorrentsReason(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"mode":"private","http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"","interval":"1m"}`)
		ctx := context.Background()
		store := tr.Store()
		passkey := strings.Repeat("a", 32)
		require.NoError(t, store.AddUser(ctx, passkey, "7"))
		require.NoError(t, store.AddClient(ctx, "A2-", "aria2"))
		url := "http://" + addrs["http"] + "/" + passkey + "/announce"
		dir := t.TempDir()
		torrent := writeTorrentFor(t, dir, url)
		hash := infoHashOf(t, torrent)
		require.NoError(t, store.RegisterTorrent(ctx, hash, "77"))
		require.NoError(t, store.DeleteTorrent(ctx, hash, "Trumped by a FLAC 24-bit upload"))
		log := aria2Log(t, dir, torrent, "torrent deleted: Trumped by a FLAC 24-bit upload")
		require.NotContains(t, log, "unregistered torrent")

		// aria2c speaks UDP to trackers only with DHT on, so UDP is
		// checked with a BEP 15 client carrying the passkey in BEP 41 URL
		// data: the reason is the error packet's message.
		udp := udpFrom(t, "127.0.0.1", addrs["udp4"])
		require.Equal(t, "torrent deleted: Trumped by a FLAC 24-bit upload", udp.announceWith(passkey, hash, "A2-1-36-0-udpclient1", 7001))
		// Once the reason's time is over (its key's TTL), the plain refusal.
		require.NoError(t, b.Client.Del(ctx, btstore.DeletedKey(hash)).Err())
		require.Equal(t, "unregistered torrent", udp.announceWith(passkey, hash, "A2-1-36-0-udpclient1", 7001))
	})
}

// Issue 28.7's proof: the deny lists refuse aria2c in open mode, by
// info-hash and by its peer_id prefix ("A2-"), with the reasons in its
// log; taken off the list, aria2c is served.
func TestAria2IsRefusedByTheDenyListsInOpenMode(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, loopbackSettings)
		ctx := context.Background()
		store := tr.Store()
		url := "http://" + addrs["http"] + "/announce"
		require.NoError(t, store.DenyClient(ctx, "A2-", "aria2 is not allowed here"))
		aria2Refusal(t, url, "your client is not allowed on this tracker: aria2 is not allowed here")
		require.NoError(t, store.AllowClient(ctx, "A2-"))
		dir := t.TempDir()
		torrent := writeTorrentFor(t, dir, url)
		got := infoHashOf(t, torrent)
		require.NoError(t, store.DenyTorrent(ctx, got, "DMCA takedown"))
		aria2Log(t, dir, torrent, "this torrent is not allowed on this tracker: DMCA takedown")
		require.Zero(t, scrapeOne(t, store, got).Incomplete, "a denied torrent has no swarm")
		require.GreaterOrEqual(t, store.Denials(), int64(2))
	})
}

// The deny lists in private mode: a whitelisted client ("A2-") whose
// version is denied ("A2-1-36-") is refused, with the reason in aria2c's
// log, before its passkey or torrent are looked at.
func TestAria2IsRefusedByTheDenyListsInPrivateMode(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m"}`)
		ctx := context.Background()
		store := tr.Store()
		passkey := strings.Repeat("d", 32)
		require.NoError(t, store.AddUser(ctx, passkey, "7"))
		require.NoError(t, store.AddClient(ctx, "A2-", "aria2"))
		require.NoError(t, store.DenyClient(ctx, "A2-1-36-", "aria2 1.36 misreports uploads"))
		dir := t.TempDir()
		torrent := writeTorrentFor(t, dir, "http://"+addrs["http"]+"/"+passkey+"/announce")
		require.NoError(t, store.RegisterTorrent(ctx, infoHashOf(t, torrent), "5"))
		aria2Log(t, dir, torrent, "your client is not allowed on this tracker: aria2 1.36 misreports uploads")
	})
}

func writeTorrentFor(t *testing.T, dir, url string) string {
	t.Helper()
	payload := filepath.Join(dir, "payload.bin")
	data := make([]byte, 32<<10)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(payload, data, 0o644))
	torrent := filepath.Join(dir, "payload.torrent")
	out, err := exec.Command("mktorrent", "-a", url, "-l", "15", "-o", torrent, payload).CombinedOutput()
	require.NoError(t, err, string(out))
	return torrent
}

// Issue 28.5's proof: a peer announcing again at once gets the failure
// over HTTP and the error over UDP; an event is served; repeat offenders
// become one "flood" outbox event each, as documented.
func TestAnnounceFloodIsRefusedAndReported(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"","interval":"10m",
			"limits":{"flood_interval":"auto","flood_report_after":3},"outbox":{}}`)
		base := "http://" + addrs["http"]
		c := httpFrom(t, "127.0.0.1")
		udp := udpFrom(t, "127.0.0.1", addrs["udp4"])
		const failure = "announcing too often: wait at least 300 seconds between announces (min interval)"
		var h, u [20]byte
		copy(h[:], "flood-http-000000000")
		copy(u[:], "flood-udp-0000000000")
		require.Empty(t, announceHTTP(t, c, base, "", h, "-qB4630-httpflooder1", 7001))
		require.Empty(t, udp.announce(u, "-qB4630-udpflooder01", 7002))
		for range 4 {
			require.Equal(t, failure, announceHTTP(t, c, base, "", h, "-qB4630-httpflooder1", 7001))
			require.Equal(t, failure, udp.announce(u, "-qB4630-udpflooder01", 7002))
		}
		// Another peer on the same torrent is not held back.
		require.Empty(t, announceHTTP(t, c, base, "", h, "-qB4630-httphonest01", 7003))
		require.Equal(t, int64(8), tr.Store().FloodRefused())
		require.Equal(t, int64(2), tr.Store().FloodReported())
		require.Equal(t, map[string]float64{"http": 4, "udp": 4}, listenerCounts(t, tr, "refused_total"))

		events, _, err := tr.Outbox().Pending(context.Background(), 0, 10)
		require.NoError(t, err)
		require.Len(t, events, 2)
		for _, e := range events {
			require.Equal(t, btplugin.FloodEventKind, e.Kind)
			var body btplugin.FloodEvent
			dec := json.NewDecoder(bytes.NewReader(e.Body))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&body))
			require.Equal(t, "-qB4630-", body.Client)
			require.Equal(t, "127.0.0.1", body.IP)
			require.EqualValues(t, 3, body.Refusals)
			require.EqualValues(t, 3600, body.WindowSeconds)
			require.EqualValues(t, 300, body.MinIntervalSeconds)
			require.Empty(t, body.UserID, "open mode")
			require.Contains(t, e.Key, "flood:"+body.InfoHash+":"+body.PeerID+":")
		}
	})
}

// Issue 28.7's full scrape: off by default; on, a scrape with no
// info_hash answers every torrent with peers, gzipped, from a cached
// body, at most once per address per per_address.
func TestFullScrapeIsGzippedCachedAndRateLimited(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		_, off := startTracker(t, b, loopbackSettings)
		resp, err := http.Get("http://" + off["http"] + "/scrape")
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(raw), "full scrapes are not served")

		tr, addrs := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","full_scrape":{"enabled":true,"every":"1h","per_address":"1h"}}`)
		ctx := context.Background()
		want := map[string]map[string]int64{}
		for i, counts := range [][2]int{{1, 0}, {2, 3}, {0, 1}} {
			var h [20]byte
			copy(h[:], "fullscrape-torrent-"+string(rune('a'+i)))
			for s := range counts[0] {
				announceStore(t, tr, h, "-TR3000-seeder-"+string(rune('a'+s)), 0)
			}
			for l := range counts[1] {
				announceStore(t, tr, h, "-TR3000-leech--"+string(rune('a'+l)), 10)
			}
			want[string(h[:])] = map[string]int64{"complete": int64(counts[0]), "incomplete": int64(counts[1]), "downloaded": 0}
		}
		require.NoError(t, tr.Store().Flush(ctx))

		get := func(local string, gz bool) (*http.Response, []byte) {
			req, err := http.NewRequest(http.MethodGet, "http://"+addrs["http"]+"/scrape", nil)
			require.NoError(t, err)
			if gz {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			resp, err := httpFrom(t, local).Transport.RoundTrip(req) // no transparent gunzip
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp, raw
		}
		decodeFiles := func(raw []byte) map[string]map[string]int64 {
			var body struct {
				Files map[string]map[string]int64 `bencode:"files"`
			}
			require.NoError(t, bencode.Unmarshal(raw, &body), "%q", raw)
			return body.Files
		}
		resp, raw = get("127.0.0.1", true)
		require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		require.NoError(t, err)
		plain, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.Equal(t, want, decodeFiles(plain))

		// The same address again: refused until per_address has passed.
		_, raw = get("127.0.0.1", true)
		require.Contains(t, string(raw), "full scrape: at most one per 3600 seconds from one address")

		// A torrent that joins now is not in the cached body, which
		// another address gets as it was, decompressed for a client that
		// does not take gzip.
		var late [20]byte
		copy(late[:], "fullscrape-torrent-z")
		announceStore(t, tr, late, "-TR3000-late-000001", 10)
		require.NoError(t, tr.Store().Flush(ctx))
		resp, raw = get("127.0.0.2", false)
		require.Empty(t, resp.Header.Get("Content-Encoding"))
		require.Equal(t, plain, raw, "the cached body, built once")
		stats := listenerCounts(t, tr, "full_scrapes_total")
		require.Equal(t, float64(2), stats["http"])

		// curl, as an operator would fetch it.
		if _, err := exec.LookPath("curl"); err == nil {
			out, err := exec.Command("curl", "-s", "--compressed", "--interface", "127.0.0.3", "http://"+addrs["http"]+"/scrape").Output()
			require.NoError(t, err)
			require.Equal(t, plain, out)
		}
	})
}

func announceStore(t *testing.T, tr *btplugin.Tracker, hash [20]byte, peer string, left uint64) {
	t.Helper()
	req := &bittorrent.AnnounceRequest{InfoHash: hash, Left: left, Event: bittorrent.EventStarted, NumWant: 1}
	copy(req.PeerID[:], peer)
	req.Addr = addrPortFor(peer)
	_, err := tr.Store().Announce(context.Background(), req)
	require.NoError(t, err)
}

// addrPortFor gives each test peer an address and port of its own.
func addrPortFor(peer string) netip.AddrPort {
	sum := sha1.Sum([]byte(peer))
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, sum[0], sum[1], sum[2]}), 1024+uint16(sum[3])<<4)
}

// TestTheDocumentedFloodEventIsOneThePluginSends: the "flood" event shown
// in docs/bittorrent-site.md decodes strictly into what the plugin sends,
// with its key built as the plugin builds it.
func TestTheDocumentedFloodEventIsOneThePluginSends(t *testing.T) {
	ev := documentedEvent(t, "**Repeat offenders**")
	require.Equal(t, btplugin.FloodEventKind, ev.Kind)
	var body btplugin.FloodEvent
	dec := json.NewDecoder(bytes.NewReader(ev.Body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body))
	require.Equal(t, "flood:"+body.InfoHash+":"+body.PeerID+":"+strconv.FormatInt(body.WindowStart.UnixMilli(), 10), ev.Key)
	again, err := json.Marshal(body)
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Body), string(again), "the plugin marshals the same body")
}

// documentedEvent reads the first JSON example after marker in
// docs/bittorrent-site.md as an outbox event, strictly.
func documentedEvent(t *testing.T, marker string) outbox.Stored {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/bittorrent-site.md")
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, marker)
	require.NotEqual(t, -1, start)
	open := strings.Index(text[start:], "```json\n")
	require.NotEqual(t, -1, open)
	block := text[start+open+len("```json\n"):]
	block = block[:strings.Index(block, "```")]
	var ev outbox.Stored
	dec := json.NewDecoder(strings.NewReader(block))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&ev), block)
	return ev
}

func TestSiteSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for bad, says := range map[string]string{
			`{"limits":{"flood_interval":"often"}}`:                      `limits.flood_interval "often" is not a duration`,
			`{"limits":{"flood_interval":"0s"}}`:                         `"auto" (90% of min_interval) or "" (off)`,
			`{"interval":"10m","limits":{"flood_interval":"6m"}}`:        "FloodInterval (6m0s) must not exceed MinInterval (5m0s)",
			`{"limits":{"flood_report_after":-2}}`:                       "limits.flood_report_after is -1 (never)",
			`{"limits":{"flood_window":"-1h"}}`:                          "limits.flood_window",
			`{"deleted_reason_ttl":"forever"}`:                           "deleted_reason_ttl",
			`{"full_scrape":{"every":"5m"}}`:                             `need "enabled": true`,
			`{"full_scrape":{"enabled":true,"per_address":"0s"}}`:        "full_scrape.per_address",
			`{"full_scrape":{"enabled":true,"every":"soon"}}`:            "full_scrape.every",
			`{"full_scrape":{"enabled":true,"every":"5m","gzip":false}}`: `unknown field "gzip"`,
		} {
			p, err := btplugin.New(context.Background(), quiet)
			require.NoError(t, err)
			err = p.(*btplugin.Tracker).Configure(context.Background(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(bad)})
			require.ErrorContains(t, err, says, bad)
			require.NoError(t, p.(*btplugin.Tracker).Close(context.Background()))
		}
	})
}
