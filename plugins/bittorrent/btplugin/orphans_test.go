package btplugin_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"crypto/sha1"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
)

// TestOrphanCleanupJob: enabled, orphan cleanup is the plugin's "orphans"
// job, and a tick removes a torrent unregistered longer than the window
// ago; a bad window is refused, naming why, and the tracker keeps its
// previous configuration.
func TestOrphanCleanupJob(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, _ := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m",
			"orphans":{"enabled":true,"window":"2h","period":"30s"}}`)
		d, err := tr.Describe(t.Context())
		require.NoError(t, err)
		require.Contains(t, d.Jobs, plugins.Job{Name: btplugin.OrphansJob, Period: 30 * time.Second})
		require.NotNil(t, tr.Orphans())

		hash := sha1.Sum([]byte("orphan job"))
		require.NoError(t, tr.Store().RegisterTorrent(t.Context(), hash, "t1"))
		require.NoError(t, tr.Store().UnregisterTorrent(t.Context(), hash))
		// Stamped three hours ago, as a clock three hours on would see it.
		old := time.Now().Add(-3 * time.Hour).UnixMilli()
		require.NoError(t, b.Client.HSet(t.Context(), btstore.TorrentKey(hash), "registered", old, "created", old, "unregistered", old).Err())
		_, err = tr.OnTick(t.Context(), plugins.Tick{Job: btplugin.OrphansJob, At: time.Now()})
		require.NoError(t, err)
		require.Zero(t, b.Client.Exists(t.Context(), btstore.TorrentKey(hash)).Val())

		for settings, why := range map[string]string{
			`{"orphans":{"enabled":true,"window":"0s"}}`:                                "racing every operation",
			`{"orphans":{"enabled":true,"window":"30m"}}`:                               "is not longer than",
			`{"orphans":{"enabld":true}}`:                                               "enabld",
			`{"reaper":{"claim_window":"3h"},"orphans":{"enabled":true,"window":"2h"}}`: "reseed claim window (claim_window)",
		} {
			err := tr.Configure(t.Context(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(settings)})
			require.ErrorContains(t, err, why, settings)
		}
		d, err = tr.Describe(t.Context())
		require.NoError(t, err)
		require.Contains(t, d.Jobs, plugins.Job{Name: btplugin.OrphansJob, Period: 30 * time.Second}, "still configured as before")
	})
}

// TestOrphanCleanupLogsWhatItChanged: idle steps log nothing at INFO (the
// issue's 17-field line every 10 s) and only count, in Stats; a step that
// removes something logs one line saying what.
func TestOrphanCleanupLogsWhatItChanged(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		logs := &lockedBuffer{}
		p, err := btplugin.New(t.Context(), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
		require.NoError(t, err)
		tr := p.(*btplugin.Tracker)
		require.NoError(t, tr.Configure(t.Context(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(
			`{"http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m","orphans":{"enabled":true,"window":"2h","period":"30s"}}`)}))
		t.Cleanup(func() { _ = tr.Close(t.Context()) })

		for range 3 {
			_, err = tr.OnTick(t.Context(), plugins.Tick{Job: btplugin.OrphansJob, At: time.Now()})
			require.NoError(t, err)
		}
		require.NotContains(t, logs.String(), "orphan cleanup", "idle steps log nothing at INFO")

		hash := sha1.Sum([]byte("orphan to log"))
		require.NoError(t, tr.Store().RegisterTorrent(t.Context(), hash, "t1"))
		require.NoError(t, tr.Store().UnregisterTorrent(t.Context(), hash))
		// Stamped three hours ago, its due entry too (the backstop's pass
		// ran on the first tick, and the next waits a day), as a clock
		// three hours on would see them.
		old := time.Now().Add(-3 * time.Hour).UnixMilli()
		require.NoError(t, b.Client.HSet(t.Context(), btstore.TorrentKey(hash), "registered", old, "created", old, "unregistered", old).Err())
		require.NoError(t, btstore.MarkTorrentDue(t.Context(), b.Client, hash, old))
		_, err = tr.OnTick(t.Context(), plugins.Tick{Job: btplugin.OrphansJob, At: time.Now()})
		require.NoError(t, err)
		require.Equal(t, 1, strings.Count(logs.String(), `msg="orphan cleanup removed records"`), logs.String())
		require.Contains(t, logs.String(), "torrents=1")

		stats, err := tr.Stats(t.Context())
		require.NoError(t, err)
		values := map[string]float64{}
		for _, m := range stats.Metrics {
			if strings.HasPrefix(m.Name, "orphans_") {
				values[m.Name+m.Labels["kind"]] = m.Value
			}
		}
		require.Equal(t, 4.0, values["orphans_steps_total"])
		require.Equal(t, 1.0, values["orphans_removed_totaltorrents"])
		require.Positive(t, values["orphans_scanned_total"])
	})
}

// TestRepairIsAHostJob: the swarm store's repair is the plugin's "repair"
// job, ticked by the host under its lease, not a loop of the store's own;
// a tick recomputes the global counters from per-torrent truth. The
// expiry sweep is the job "sweep" the same way.
func TestRepairIsAHostJob(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, _ := startTracker(t, b, `{"http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m"}`)
		d, err := tr.Describe(t.Context())
		require.NoError(t, err)
		require.Contains(t, d.Jobs, plugins.Job{Name: btplugin.RepairJob, Period: time.Hour})

		require.NoError(t, b.Client.HSet(t.Context(), btstore.StatsKey, "seeders", 999).Err())
		_, err = tr.OnTick(t.Context(), plugins.Tick{Job: btplugin.RepairJob, At: time.Now()})
		require.NoError(t, err)
		stats, err := tr.Store().Stats(t.Context())
		require.NoError(t, err)
		require.Zero(t, stats.Seeders, "the repair recomputed the count from the (empty) swarms")

		// The expiry sweep is a host job too (swarm's own tests cover what
		// a sweep removes).
		require.Contains(t, d.Jobs, plugins.Job{Name: btplugin.SweepJob, Period: 15 * time.Second})
		_, err = tr.OnTick(t.Context(), plugins.Tick{Job: btplugin.SweepJob, At: time.Now()})
		require.NoError(t, err)
	})
}
