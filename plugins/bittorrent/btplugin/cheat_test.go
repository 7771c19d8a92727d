package btplugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// cheaterAnnounce sends one scripted announce over the HTTP listener
// from the loopback address c is bound to, and requires it accepted.
func cheaterAnnounce(t *testing.T, c *http.Client, base, passkey string, hash [20]byte, peer string,
	up, down, left uint64, event wire.Event) {
	t.Helper()
	q := wire.AnnounceQuery{InfoHash: hash, Port: 7100, Uploaded: up, Downloaded: down, Left: left, Event: event,
		Compact: true, NumWant: 5}
	copy(q.PeerID[:], peer)
	resp, err := c.Get(base + "/" + passkey + "/announce?" + string(wire.AppendAnnounceQuery(nil, &q)))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, bencode.Unmarshal(raw, &body), "%q", raw)
	require.NotContains(t, body, "failure reason")
}

// Issue 28.3 with real clients: an honest aria2c seeder and leecher move
// a file through hoard (private mode, accounting on, the default
// thresholds but for the address limit) while a scripted cheater
// announces over the same HTTP listener: upload on a torrent nobody
// leeches at a rate no link has, ten times a torrent's size downloaded,
// and one passkey from three loopback addresses. Each of the cheater's
// signals reaches the outbox once, as a "cheat" event; the honest pair
// fires none, and their ledgers hold their announces with transfer.
func TestCheatSignalsBesideAnHonestAria2Swarm(t *testing.T) {
	requireCommand(t, "aria2c", "aria2")
	requireCommand(t, "mktorrent", "mktorrent")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m",
			"accounting":{"signal_max_addresses":2},"outbox":{}}`)
		store := tr.Store()
		ctx := context.Background()
		base := "http://" + addrs["http"]
		seedKey, leechKey, cheatKey := strings.Repeat("s", 32), strings.Repeat("l", 32), strings.Repeat("c", 32)
		require.NoError(t, store.AddUser(ctx, seedKey, "seeder"))
		require.NoError(t, store.AddUser(ctx, leechKey, "leecher"))
		require.NoError(t, store.AddUser(ctx, cheatKey, "cheater"))
		require.NoError(t, store.AddClient(ctx, "A2-", "aria2"))
		require.NoError(t, store.AddClient(ctx, "-qB", "qBittorrent"))

		dir := t.TempDir()
		leechDir := filepath.Join(dir, "leech")
		seedDir, payload := writeSeedPayload(t, dir, 1<<20+777)
		seedTorrent := passkeyTorrent(t, dir, seedDir, base, seedKey)
		leechTorrent := passkeyTorrent(t, dir, seedDir, base, leechKey)
		honest := infoHashOf(t, seedTorrent)
		size := int64(len(payload))
		require.NoError(t, store.Register(ctx, honest, swarm.Registration{ID: "honest", Size: size}))
		var ghost, greedy [20]byte
		copy(ghost[:], "cheat-ghost-torrent0")
		copy(greedy[:], "cheat-greedy-torrent")
		require.NoError(t, store.Register(ctx, ghost, swarm.Registration{ID: "ghost", Size: size}))
		require.NoError(t, store.Register(ctx, greedy, swarm.Registration{ID: "greedy", Size: size}))

		// The cheater starts: a seeder on "ghost" (nobody else is there)
		// and a leecher on "greedy", from 127.0.0.2.
		c2 := httpFrom(t, "127.0.0.2")
		cheaterAnnounce(t, c2, base, cheatKey, ghost, "-qB4630-ghostseeder1", 0, 0, 0, wire.EventStarted)
		cheaterAnnounce(t, c2, base, cheatKey, greedy, "-qB4630-greedyleech1", 0, 0, uint64(size), wire.EventStarted)

		runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		seeder := exec.CommandContext(runCtx, "aria2c", append(aria2Flags(seedDir, freePort(t)), "--seed-ratio=0.0", seedTorrent)...)
		seederLog := &lockedBuffer{}
		seeder.Stdout, seeder.Stderr = seederLog, seederLog
		require.NoError(t, seeder.Start())
		waitFor(t, "the seeder's announce", func() bool {
			info, err := store.Torrent(ctx, honest)
			return err == nil && info.Seeders == 1
		})
		leecher := exec.CommandContext(runCtx, "aria2c", append(aria2Flags(leechDir, freePort(t)), "--seed-time=0", leechTorrent)...)
		if out, err := leecher.CombinedOutput(); err != nil {
			t.Fatalf("leecher: %v\n%s\nseeder: %s", err, out, seederLog.String())
		}
		got, err := os.ReadFile(filepath.Join(leechDir, "payload.bin"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(payload, got))
		// The seeder reports its upload with its stop, after the leecher left.
		require.NoError(t, seeder.Process.Signal(os.Interrupt))
		_ = seeder.Wait()

		// The cheater, seconds after it started: 100 GiB uploaded with no
		// leecher on "ghost", ten sizes downloaded on "greedy", and the
		// same passkey from two more addresses.
		cheaterAnnounce(t, c2, base, cheatKey, ghost, "-qB4630-ghostseeder1", 100<<30, 0, 0, wire.EventNone)
		cheaterAnnounce(t, c2, base, cheatKey, greedy, "-qB4630-greedyleech1", 0, uint64(10*size), uint64(size), wire.EventNone)
		cheaterAnnounce(t, httpFrom(t, "127.0.0.3"), base, cheatKey, greedy, "-qB4630-greedyleech2", 0, 0, uint64(size), wire.EventStarted)
		cheaterAnnounce(t, httpFrom(t, "127.0.0.4"), base, cheatKey, ghost, "-qB4630-ghostseeder2", 0, 0, 0, wire.EventStarted)
		// The per-torrent signals are checked in the frontend's batched
		// flush (the loop's, within FlushInterval; now here).
		require.NoError(t, store.Flush(ctx))

		events, _, err := tr.Outbox().Pending(ctx, 0, 100)
		require.NoError(t, err)
		fired := map[string]btplugin.CheatEvent{}
		for _, e := range events {
			if e.Kind != btplugin.CheatEventKind {
				continue
			}
			var body btplugin.CheatEvent
			dec := json.NewDecoder(bytes.NewReader(e.Body))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&body))
			require.Equal(t, "cheater", body.UserID, "the honest pair fires nothing: %s", e.Body)
			_, twice := fired[body.Signal]
			require.False(t, twice, "%s fired once", body.Signal)
			fired[body.Signal] = body
			require.Equal(t, fmt.Sprintf("cheat:%s:%s:%s:%d", body.Signal, body.InfoHash, body.UserID, body.At.UnixMilli()), e.Key)
		}
		require.Len(t, fired, 4, "%v", fired)
		require.Equal(t, btstore.HexInfoHash(ghost), fired["no_leecher"].InfoHash)
		require.Equal(t, "ghost", fired["no_leecher"].TorrentID)
		require.EqualValues(t, 100<<30, fired["no_leecher"].Uploaded)
		require.Nil(t, fired["no_leecher"].LastLeecherLeft, "nobody ever leeched it")
		require.EqualValues(t, 100<<30, fired["upload_rate"].Uploaded)
		require.Greater(t, fired["upload_rate"].UploadRate, int64(btplugin.DefaultSignalMaxUploadRate))
		require.Equal(t, "greedy", fired["over_download"].TorrentID)
		require.Equal(t, 10*size, fired["over_download"].Downloaded)
		require.Equal(t, size, fired["over_download"].Size)
		require.ElementsMatch(t, []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}, fired["addresses"].Addresses)

		// The honest pair's ledgers: the seeder's upload, the leecher's download.
		s, err := store.UserOnTorrent(ctx, honest, "seeder")
		require.NoError(t, err)
		l, err := store.UserOnTorrent(ctx, honest, "leecher")
		require.NoError(t, err)
		require.NotEmpty(t, s.Ledger)
		require.NotEmpty(t, l.Ledger)
		sum := func(ledger []swarm.LedgerEntry, up bool) (n int64) {
			for _, e := range ledger {
				if up {
					n += e.Uploaded
				} else {
					n += e.Downloaded
				}
			}
			return n
		}
		require.Equal(t, s.Uploaded, sum(s.Ledger, true), "every upload delta is in the ledger")
		require.Equal(t, l.Downloaded, sum(l.Ledger, false), "every download delta is in the ledger")
		require.GreaterOrEqual(t, l.Downloaded, size)
		t.Logf("seeder uploaded %d in %d ledger entries; leecher downloaded %d in %d", s.Uploaded, len(s.Ledger),
			l.Downloaded, len(l.Ledger))
	})
}

// The documented cheat events decode strictly as CheatEvent, carry the
// key the plugin makes, and marshal back to the same body.
func TestTheDocumentedCheatEventsAreOnesThePluginSends(t *testing.T) {
	for _, marker := range []string{"**Upload with no leecher**", "**Upload rate**", "**Over download**", "**Many addresses**"} {
		ev := documentedEvent(t, marker)
		require.Equal(t, btplugin.CheatEventKind, ev.Kind, marker)
		var body btplugin.CheatEvent
		dec := json.NewDecoder(bytes.NewReader(ev.Body))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&body), marker)
		require.Equal(t, fmt.Sprintf("cheat:%s:%s:%s:%d", body.Signal, body.InfoHash, body.UserID, body.At.UnixMilli()), ev.Key, marker)
		again, err := json.Marshal(body)
		require.NoError(t, err)
		require.JSONEq(t, string(ev.Body), string(again), "%s: the plugin marshals the same body", marker)
	}
}

// Bad ledger and signal settings stop Configure with the setting named.
func TestCheatSettingsAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		for bad, says := range map[string]string{
			`{"accounting":{"ledger_entries":-1}}`:           "Watch.LedgerEntries must be 0 (off) to 1000",
			`{"accounting":{"ledger_entries":5000}}`:         "Watch.LedgerEntries must be 0 (off) to 1000",
			`{"accounting":{"signal_period":"soon"}}`:        `accounting.signal_period "soon" is not a duration`,
			`{"accounting":{"signal_address_window":"-1h"}}`: "accounting.signal_address_window",
			`{"accounting":{"signal_max_upload_rate":-5}}`:   "Watch.MaxUploadRate must be 0 (off) or positive",
			`{"accounting":{"signal_download_factor":0.5}}`:  "Watch.DownloadFactor 0.5 is below 1",
			`{"accounting":{"signal_max_addresses":-1}}`:     "Watch.MaxAddresses must be 0 (off) or positive",
			`{"accounting":{"signal_no_leecher":"yes"}}`:     "signal_no_leecher",
		} {
			p, err := btplugin.New(context.Background(), quiet)
			require.NoError(t, err)
			err = p.Configure(context.Background(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(bad)})
			require.ErrorContains(t, err, says, bad)
		}
	})
}
