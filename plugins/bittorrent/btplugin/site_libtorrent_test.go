package btplugin_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// libtorrentTrackerScript runs python3-libtorrent on a .torrent and prints,
// as JSON, what its tracker alerts said: the failure reason of the first
// tracker_error_alert ("error"), and whether an announce was answered
// first ("replied"). With "once" it stops at the first answer. With
// "flood", once answered it forces re-announces
// (ignoring the min interval, as a client's "force reannounce" does) until
// one fails.
const libtorrentTrackerScript = `
import json, sys, time
import libtorrent as lt
torrent, save, port, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ses = lt.session({'listen_interfaces': '127.0.0.1:' + port, 'enable_dht': False, 'enable_lsd': False,
                  'enable_upnp': False, 'enable_natpmp': False,
                  'alert_mask': lt.alert.category_t.status_notification | lt.alert.category_t.error_notification | lt.alert.category_t.tracker_notification})
h = ses.add_torrent({'ti': lt.torrent_info(torrent), 'save_path': save})
replied, forced = 0, 0
deadline = time.time() + 40
while time.time() < deadline:
    ses.wait_for_alert(500)
    for a in ses.pop_alerts():
        if isinstance(a, lt.tracker_reply_alert):
            replied += 1
            if mode == 'flood' and forced < 20:
                forced += 1
                h.force_reannounce(0, -1, lt.reannounce_flags_t.ignore_min_interval)
        if isinstance(a, lt.tracker_error_alert):
            print(json.dumps({'replied': replied, 'forced': forced, 'error': a.failure_reason(), 'message': a.message()}))
            sys.exit(0)
    if mode == 'once' and replied:
        break
    if mode == 'flood' and replied and forced == 0:
        forced = 1
        h.force_reannounce(0, -1, lt.reannounce_flags_t.ignore_min_interval)
print(json.dumps({'replied': replied, 'forced': forced, 'error': ''}))
sys.exit(0 if mode == 'once' and replied else 3)
`

type libtorrentAlerts struct {
	Replied int    `json:"replied"`
	Forced  int    `json:"forced"`
	Error   string `json:"error"`
	Message string `json:"message"` // the whole alert, for a failing test's output
}

const debianPython = "/usr/bin/python3" // Debian's python, which has python3-libtorrent

func requireLibtorrent(t *testing.T) {
	t.Helper()
	if err := exec.Command(debianPython, "-c", "import libtorrent").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3-libtorrent is missing: .ci/run installs it (%v)", err)
		}
		t.Skipf("python3-libtorrent is missing (apt-get install python3-libtorrent); CI installs it")
	}
}

// libtorrentTorrent makes a v1 .torrent of fresh random data announced to
// url, with libtorrent itself, and returns its path and info-hash.
func libtorrentTorrent(t *testing.T, dir, url string) (string, bittorrent.InfoHash) {
	t.Helper()
	script := filepath.Join(dir, "create.py")
	require.NoError(t, os.WriteFile(script, []byte(libtorrentScript), 0o644))
	payload := filepath.Join(dir, "data.bin")
	data := make([]byte, 64<<10)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(payload, data, 0o644))
	torrent := filepath.Join(dir, "data.torrent")
	out, err := exec.Command(debianPython, script, "create", payload, url, torrent).CombinedOutput()
	require.NoError(t, err, string(out))
	raw, err := hex.DecodeString(strings.TrimSpace(string(out)))
	require.NoError(t, err, string(out))
	var hash bittorrent.InfoHash
	copy(hash[:], raw)
	require.Equal(t, infoHashOf(t, torrent), hash)
	return torrent, hash
}

// libtorrentAnnounce runs libtorrentTrackerScript in mode ("once" or
// "flood") on torrent, from an empty download directory (libtorrent is a
// leecher), and returns what its alerts said.
func libtorrentAnnounce(t *testing.T, torrent, mode string) libtorrentAlerts {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "tracker.py")
	require.NoError(t, os.WriteFile(script, []byte(libtorrentTrackerScript), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, debianPython, script, torrent, dir, strconv.Itoa(freePort(t)), mode).CombinedOutput()
	var alerts libtorrentAlerts
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(out), &alerts), "%v: %s", err, out)
	require.NoError(t, err, string(out))
	return alerts
}

// The deny lists with libtorrent: a denied info-hash and a denied peer_id
// prefix (libtorrent's "-LT") each reach libtorrent's tracker_error_alert
// as their failure reason, in open and in private mode; off the list,
// libtorrent is answered.
func TestLibtorrentIsRefusedByTheDenyLists(t *testing.T) {
	requireLibtorrent(t)
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for _, mode := range []string{"open", "private"} {
			t.Run(mode, func(t *testing.T) {
				tr, addrs := startTracker(t, b, `{"mode":"`+mode+`","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m"}`)
				ctx := context.Background()
				store := tr.Store()
				url, passkey := "http://"+addrs["http"]+"/announce", ""
				if mode == "private" {
					passkey = strings.Repeat("t", 32)
					require.NoError(t, store.AddUser(ctx, passkey, "9"))
					require.NoError(t, store.AddClient(ctx, "-LT", "libtorrent"))
					// libtorrent's SSRF mitigation refuses a loopback
					// tracker whose path is not /announce.
					url = "http://" + addrs["http"] + "/announce?passkey=" + passkey
				}
				torrent, hash := libtorrentTorrent(t, t.TempDir(), url)
				if mode == "private" {
					require.NoError(t, store.RegisterTorrent(ctx, hash, "12"))
				}

				require.NoError(t, store.DenyTorrent(ctx, hash, "DMCA takedown"))
				got := libtorrentAnnounce(t, torrent, "once")
				require.Equal(t, "this torrent is not allowed on this tracker: DMCA takedown", got.Error, got.Message)
				require.Zero(t, got.Replied)
				require.NoError(t, store.AllowTorrent(ctx, hash))

				require.NoError(t, store.DenyClient(ctx, "-LT", "libtorrent is not allowed here"))
				got = libtorrentAnnounce(t, torrent, "once")
				require.Equal(t, "your client is not allowed on this tracker: libtorrent is not allowed here", got.Error)
				require.Zero(t, got.Replied)
				require.GreaterOrEqual(t, store.Denials(), int64(2))
				entries, err := store.Scrape(ctx, passkey, []bittorrent.InfoHash{hash})
				require.NoError(t, err)
				require.Zero(t, entries[0].Incomplete, "a denied client joins no swarm")

				require.NoError(t, store.AllowClient(ctx, "-LT"))
				got = libtorrentAnnounce(t, torrent, "once")
				require.Empty(t, got.Error)
				require.Positive(t, got.Replied)
			})
		}
	})
}

// Flood control with libtorrent: its started announce is answered; the
// re-announce it is made to send at once (a "force reannounce") gets the
// flood failure in its tracker_error_alert, and is counted.
func TestLibtorrentAnnounceFloodIsRefused(t *testing.T) {
	requireLibtorrent(t)
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","interval":"10m",
			"limits":{"flood_interval":"auto","flood_report_after":3},"outbox":{}}`)
		torrent, hash := libtorrentTorrent(t, t.TempDir(), "http://"+addrs["http"]+"/announce")
		got := libtorrentAnnounce(t, torrent, "flood")
		require.Equal(t, 1, got.Replied, "the started announce is answered")
		require.Equal(t, "announcing too often: wait at least 300 seconds between announces (min interval)", got.Error)
		require.EqualValues(t, 1, tr.Store().FloodRefused())
		info, err := tr.Store().Torrent(context.Background(), hash)
		require.NoError(t, err)
		require.GreaterOrEqual(t, info.Announces, int64(1), "%+v", info)
	})
}
