package btplugin_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/anacrolix/torrent/tracker"
	"github.com/anacrolix/torrent/types"
	"github.com/anacrolix/torrent/types/infohash"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// TestMain runs the tests on a real redis-server and a real 3-node Redis
// Cluster. Started with FEED_CHILD_REDIS set, the test binary is instead
// a frontend running one feed round, for TestFeedSurvivesKilledFrontends
// to SIGKILL mid-flush.
func TestMain(m *testing.M) {
	if url := os.Getenv("FEED_CHILD_REDIS"); url != "" {
		os.Exit(runFeedChild(url))
	}
	redistest.RunMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startTracker runs the plugin as hoard would, on loopback ports the OS
// picks, against the backend's Redis.
func startTracker(t *testing.T, b redistest.Backend, settings string) (*btplugin.Tracker, map[string]string) {
	t.Helper()
	p, err := btplugin.New(context.Background(), quiet)
	require.NoError(t, err)
	tr := p.(*btplugin.Tracker)
	require.NoError(t, tr.Configure(context.Background(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(settings)}))
	t.Cleanup(func() { _ = tr.Close(context.Background()) })
	d, err := tr.Describe(context.Background())
	require.NoError(t, err)
	addrs := map[string]string{}
	for _, l := range d.Listeners {
		addrs[l.Name] = l.Address
	}
	return tr, addrs
}

const loopbackSettings = `{"http":"127.0.0.1:0","udp4":"127.0.0.1:0","udp6":"[::1]:0","interval":"1m"}`

func requireCommand(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: .ci/run installs Debian's %s", path, pkg)
		}
		t.Skipf("%s is missing (apt-get install %s); CI installs it", path, pkg)
	}
}

// freePort is a port for a BitTorrent client child to listen on, TCP and
// UDP (libtorrent binds both; aria2c binds 0.0.0.0), from below the
// ephemeral range so no outgoing connection takes it first.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Get(freeport.TCP | freeport.UDP)
	require.NoError(t, err)
	return port
}

// infoHashOf hashes a .torrent file's info dictionary.
func infoHashOf(t *testing.T, path string) bittorrent.InfoHash {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var meta struct {
		Info bencode.Bytes `bencode:"info"`
	}
	require.NoError(t, bencode.Unmarshal(raw, &meta))
	return sha1.Sum(meta.Info)
}

func scrapeOne(t *testing.T, store *swarm.Store, hash bittorrent.InfoHash) bittorrent.ScrapeEntry {
	t.Helper()
	entries, err := store.Scrape(context.Background(), "", []bittorrent.InfoHash{hash})
	require.NoError(t, err)
	return entries[0]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// aria2Flags keep aria2c on loopback and on our tracker only.
func aria2Flags(dir string, port int) []string {
	return []string{
		"--dir=" + dir, "--listen-port=" + strconv.Itoa(port), "--enable-dht=false", "--enable-dht6=false",
		"--bt-enable-lpd=false", "--enable-peer-exchange=false", "--disable-ipv6=true", "--summary-interval=0",
		"--console-log-level=warn", "--check-integrity=true", "--bt-stop-timeout=60", "--auto-save-interval=0",
	}
}

// TestAria2DownloadThroughHoard: an aria2c seeder and an aria2c leecher
// find each other only through hoard's HTTP tracker on 127.0.0.1 (DHT,
// LPD and PEX off), and the file arrives byte-identical.
func TestAria2DownloadThroughHoard(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, loopbackSettings)
		dir := t.TempDir()
		seedDir, leechDir := filepath.Join(dir, "seed"), filepath.Join(dir, "leech")
		require.NoError(t, os.MkdirAll(seedDir, 0o755))
		payload := make([]byte, 1<<20+12345)
		_, _ = rand.Read(payload)
		require.NoError(t, os.WriteFile(filepath.Join(seedDir, "payload.bin"), payload, 0o644))
		torrent := filepath.Join(dir, "payload.torrent")
		out, err := exec.Command("mktorrent", "-a", "http://"+addrs["http"]+"/announce", "-l", "16",
			"-o", torrent, filepath.Join(seedDir, "payload.bin")).CombinedOutput()
		require.NoError(t, err, string(out))
		hash := infoHashOf(t, torrent)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		seeder := exec.CommandContext(ctx, "aria2c", append(aria2Flags(seedDir, freePort(t)), "--seed-ratio=0.0", torrent)...)
		seederLog := &lockedBuffer{}
		seeder.Stdout, seeder.Stderr = seederLog, seederLog
		require.NoError(t, seeder.Start())
		defer func() { _ = seeder.Process.Kill(); _ = seeder.Wait() }()
		waitFor(t, "the seeder's announce", func() bool { return scrapeOne(t, tr.Store(), hash).Complete == 1 })

		leecher := exec.CommandContext(ctx, "aria2c", append(aria2Flags(leechDir, freePort(t)), "--seed-time=0", torrent)...)
		out, err = leecher.CombinedOutput()
		if err != nil {
			t.Fatalf("leecher: %v\n%s\nseeder: %s", err, out, seederLog.String())
		}
		got, err := os.ReadFile(filepath.Join(leechDir, "payload.bin"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(payload, got), "the downloaded file differs")

		// The leecher said stopped on exit; the seeder is still there.
		waitFor(t, "the leecher's stop", func() bool {
			e := scrapeOne(t, tr.Store(), hash)
			return e.Complete == 1 && e.Incomplete == 0
		})
		info, err := tr.Store().Torrent(context.Background(), hash)
		require.NoError(t, err)
		require.GreaterOrEqual(t, info.Announces, int64(3), "started by both, stopped by the leecher")
	})
}

// lockedBuffer collects a child's output while the test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const libtorrentScript = `
import json, os, sys, time
import libtorrent as lt
mode = sys.argv[1]
if mode == 'create':
    path, url, out = sys.argv[2], sys.argv[3], sys.argv[4]
    fs = lt.file_storage()
    lt.add_files(fs, path)
    ct = lt.create_torrent(fs, 0, lt.create_torrent.v1_only)
    ct.add_tracker(url)
    lt.set_piece_hashes(ct, os.path.dirname(path))
    open(out, 'wb').write(lt.bencode(ct.generate()))
    print(lt.torrent_info(out).info_hashes().v1)
    sys.exit(0)
torrent, save, port = sys.argv[2], sys.argv[3], sys.argv[4]
ses = lt.session({'listen_interfaces': '127.0.0.1:' + port, 'enable_dht': False, 'enable_lsd': False,
                  'enable_upnp': False, 'enable_natpmp': False,
                  'alert_mask': lt.alert.category_t.status_notification | lt.alert.category_t.error_notification | lt.alert.category_t.tracker_notification})
ses.add_torrent({'ti': lt.torrent_info(torrent), 'save_path': save})
deadline = time.time() + 40
while time.time() < deadline:
    ses.wait_for_alert(500)
    for a in ses.pop_alerts():
        if isinstance(a, lt.tracker_reply_alert):
            print(json.dumps({'peers': a.num_peers}))
            sys.exit(0)
        if isinstance(a, lt.tracker_error_alert):
            print(json.dumps({'error': a.error_message()}))
            sys.exit(2)
print(json.dumps({'error': 'no tracker reply'}))
sys.exit(3)
`

// TestLibtorrentAnnouncesAndReceivesPeers: python3-libtorrent seeds a
// v1-only torrent, announces it to hoard, and gets the leecher that was
// already in the swarm.
func TestLibtorrentAnnouncesAndReceivesPeers(t *testing.T) {
	requireLibtorrent(t)
	const python = debianPython
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, loopbackSettings)
		dir := t.TempDir()
		script := filepath.Join(dir, "lt.py")
		require.NoError(t, os.WriteFile(script, []byte(libtorrentScript), 0o644))
		payload := filepath.Join(dir, "data.bin")
		data := make([]byte, 300_000)
		_, _ = rand.Read(data)
		require.NoError(t, os.WriteFile(payload, data, 0o644))
		torrent := filepath.Join(dir, "data.torrent")
		out, err := exec.Command(python, script, "create", payload, "http://"+addrs["http"]+"/announce", torrent).CombinedOutput()
		require.NoError(t, err, string(out))
		raw, err := hex.DecodeString(strings.TrimSpace(string(out)))
		require.NoError(t, err, string(out))
		var hash bittorrent.InfoHash
		copy(hash[:], raw)
		require.Equal(t, infoHashOf(t, torrent), hash)

		// A leecher already in the swarm.
		leecher := &bittorrent.AnnounceRequest{InfoHash: hash, Addr: netip.MustParseAddrPort("127.0.0.1:6881"),
			Left: 300_000, Event: bittorrent.EventStarted, NumWant: 50}
		copy(leecher.PeerID[:], "-GO0001-leecher00001")
		_, err = tr.Store().Announce(context.Background(), leecher)
		require.NoError(t, err)

		out, err = exec.Command(python, script, "announce", torrent, dir, strconv.Itoa(freePort(t))).CombinedOutput()
		require.NoError(t, err, string(out))
		var reply struct {
			Peers int    `json:"peers"`
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(bytes.TrimSpace(out), &reply), string(out))
		require.Empty(t, reply.Error)
		require.Equal(t, 1, reply.Peers, "the seeder gets the leecher")
		// libtorrent said stopped when its session ended; it had been a
		// seeder, so the torrent's last-seeded time was set.
		e := scrapeOne(t, tr.Store(), hash)
		require.EqualValues(t, 1, e.Incomplete)
		info, err := tr.Store().Torrent(context.Background(), hash)
		require.NoError(t, err)
		require.False(t, info.LastAction.IsZero(), "libtorrent announced as a seeder (it has the data): %+v", info)
		require.GreaterOrEqual(t, info.Announces, int64(2))
	})
}

// TestUDPAnnounceAndScrapeWithAnacrolix drives the plugin's UDP listeners
// (IPv4 and IPv6) with anacrolix/torrent's tracker client against the real
// Redis store.
func TestUDPAnnounceAndScrapeWithAnacrolix(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, loopbackSettings)
		var hash bittorrent.InfoHash
		_, _ = rand.Read(hash[:])
		announce := func(addr string, id string, port uint16, left int64) tracker.AnnounceResponse {
			cl, err := tracker.NewClient("udp://"+addr+"/announce", tracker.NewClientOpts{Slogger: quiet})
			require.NoError(t, err)
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var peer types.PeerID
			copy(peer[:], id)
			resp, err := cl.Announce(ctx, tracker.AnnounceRequest{InfoHash: infohash.T(hash), PeerId: peer,
				Left: left, Event: tracker.Started, NumWant: -1, Port: port}, tracker.AnnounceOpt{})
			require.NoError(t, err)
			return resp
		}
		first := announce(addrs["udp4"], "-AN0001-seeder000001", 7001, 0)
		require.Empty(t, first.Peers)
		second := announce(addrs["udp4"], "-AN0001-leecher00002", 7002, 1000)
		require.Len(t, second.Peers, 1)
		ap, ok := second.Peers[0].ToNetipAddrPort()
		require.True(t, ok)
		require.Equal(t, "127.0.0.1:7001", netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String())
		require.EqualValues(t, 1, second.Seeders)
		require.EqualValues(t, 1, second.Leechers)
		third := announce(addrs["udp6"], "-AN0001-leecher00003", 7003, 1000)
		require.EqualValues(t, 2, third.Leechers)

		cl, err := tracker.NewClient("udp://"+addrs["udp4"]+"/announce", tracker.NewClientOpts{Slogger: quiet})
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		scraped, err := cl.Scrape(ctx, []infohash.T{infohash.T(hash)})
		require.NoError(t, err)
		require.Len(t, scraped, 1)
		require.EqualValues(t, 1, scraped[0].Seeders)
		require.EqualValues(t, 2, scraped[0].Leechers)

		// The same counts are in Redis.
		info, err := tr.Store().Torrent(context.Background(), hash)
		require.NoError(t, err)
		require.EqualValues(t, 1, info.Seeders)
		require.EqualValues(t, 2, info.Leechers)
		require.EqualValues(t, 3, info.Announces, fmt.Sprintf("%+v", info))
	})
}
