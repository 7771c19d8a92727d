package btplugin_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/netguard"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer/opentrackertest"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/plugins/plugintest"
)

const scoringSettings = `{"http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m",
	"scoring":{"enabled":true,"period":"24h","idle_poll":"20ms","scale_interval":"50ms","max_workers":4,
		"allow_private_targets":true}}`

// TestTrackerWithScoringConformsToThePluginContract: the suite again with
// scoring on (its item type, its job ticked, its hooks fed an item it
// cannot parse).
func TestTrackerWithScoringConformsToThePluginContract(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		plugintest.Run(t, btplugin.New, plugintest.Options{
			Config:      plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(scoringSettings)},
			BadSettings: json.RawMessage(`{"scoring":{"enabled":true,"removal":"forget"}}`),
		})
	})
}

// TestScoringRunsOnThePluginPlatform: in a real host over the real queue
// engine, the "score" job's first tick tracks the swarm at 1.0 and queues
// its item; the plugin's own workers claim it, count the one peer and
// report Done with the counts; the event comes back through the project's
// event log to OnItemDone, which applies ×0.8 (some peers, fewer than
// 50). The counts reach Stats.
func TestScoringRunsOnThePluginPlatform(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		hash := bittorrent.InfoHash{0x5c, 'o', 'r', 'e'}
		seeder, err := swarm.New(b.Client, swarm.Config{Logger: quiet, AnnouncePipelines: -1})
		require.NoError(t, err)
		var id bittorrent.PeerID
		copy(id[:], "-GO0001-scoring00001")
		_, err = seeder.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: id,
			Addr: netip.MustParseAddrPort("10.1.2.3:6881")})
		require.NoError(t, err)

		engine, h, tr := hostTracker(t, b, scoringSettings)

		require.Eventually(t, func() bool {
			rec, err := tr.Scorer().Record(ctx, hash)
			return err == nil && rec.Round == 1
		}, 20*time.Second, 10*time.Millisecond)
		rec, err := tr.Scorer().Record(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "active", rec.State)
		require.InDelta(t, 0.8, rec.Score, 1e-12)
		require.Equal(t, int64(1), rec.LastPeers)
		require.Equal(t, int64(1), rec.LastNew)
		// The index entry is settled by its own script after the record's
		// (its shard is another slot on a cluster): wait for it, not assume it.
		requireIndexedAt(t, tr.Scorer(), hash, 0.8)

		counts, err := engine.Counts(ctx, scoring.DefaultProject)
		require.NoError(t, err)
		require.Equal(t, int64(1), counts.Done)
		var stats plugins.Stats
		require.NoError(t, h.Call(ctx, "bittorrent", func(ctx context.Context, p plugins.Plugin) error {
			stats, err = p.Stats(ctx)
			return err
		}))
		got := map[string]float64{}
		for _, m := range stats.Metrics {
			if m.Labels == nil {
				got[m.Name] = m.Value
			}
		}
		require.Equal(t, 1.0, got["torrents_count"])
		require.Equal(t, 1.0, got["torrents_processed"])
		require.Equal(t, 1.0, got["torrents_processed_last_hour"])
		require.GreaterOrEqual(t, got["scoring_workers"], 1.0)
	})
}

// TestScoringAnnouncesToExternalTrackersOnThePlatform: the same cycle
// with an external tracker registered for the torrent (Debian's
// opentracker on 127.0.0.1 with 60 fake peers): the plugin's worker
// announces to it, the result carries the tracker's counts through the
// event log, and OnItemDone moves the tracker's line (full, all new:
// ×1.2) beside the own swarm's (one peer: ×0.8); the torrent ranks by the
// better one.
func TestScoringAnnouncesToExternalTrackersOnThePlatform(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		hash := bittorrent.InfoHash{0x5c, 'e', 'x', 't'}
		ot := opentrackertest.Start(t, [][20]byte{hash})
		ot.Announce(t, hash, 0, 60)
		seeder, err := swarm.New(b.Client, swarm.Config{Logger: quiet, AnnouncePipelines: -1})
		require.NoError(t, err)
		var id bittorrent.PeerID
		copy(id[:], "-GO0001-scoring00002")
		_, err = seeder.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: id,
			Addr: netip.MustParseAddrPort("10.1.2.4:6881")})
		require.NoError(t, err)
		admin := scoring.New(b.Client, scoring.Policy{Targets: netguard.Policy{AllowPrivate: true}}, nil, quiet)
		_, _, err = admin.SetTrackers(ctx, hash, []scoring.Tracker{{URL: ot.UDPURL()}})
		require.NoError(t, err)

		_, _, tr := hostTracker(t, b, scoringSettings)
		require.Eventually(t, func() bool {
			rec, err := tr.Scorer().Record(ctx, hash)
			return err == nil && rec.Round == 1
		}, 20*time.Second, 10*time.Millisecond)
		v, err := tr.Scorer().View(ctx, hash)
		require.NoError(t, err)
		require.Len(t, v.Sources, 2)
		require.InDelta(t, 0.8, *v.Sources[0].Line, 1e-12, "own swarm: one peer")
		require.Equal(t, ot.UDPURL(), v.Sources[1].Source)
		require.InDelta(t, 1.2, *v.Sources[1].Line, 1e-12, "opentracker: 60 of max 50, all new")
		require.Equal(t, int64(60), v.Sources[1].Peers)
		require.InDelta(t, 1.2, v.Score, 1e-12)
		requireIndexedAt(t, tr.Scorer(), hash, 1.2) // the index ranks by the best line
	})
}

// requireIndexedAt waits for the torrent's index entry to show want. The
// record is applied first and the index settled after it, by a second
// script (on a cluster the index shard is another slot), so a reader that
// saw the record's round can still see the index's previous score for a
// moment; an index that never settles fails here.
func requireIndexedAt(t *testing.T, scorer *scoring.Scorer, hash bittorrent.InfoHash, want float64) {
	t.Helper()
	var last scoring.Record
	require.Eventually(t, func() bool {
		rec, err := scorer.Record(t.Context(), hash)
		if err != nil {
			return false
		}
		last = rec
		return rec.Indexed && rec.IndexedAt > want-1e-12 && rec.IndexedAt < want+1e-12
	}, 10*time.Second, 5*time.Millisecond, "index of %x: want %v, last read %+v", hash, want, &last)
}

// testWriter sends the host's log to the test's, shown when it fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestScoringHooksAndTick: the item type and job are described; a tick
// with no host API returns the items itself; OnItemDone applies a result
// once, and acknowledges one it can never use without changing anything.
func TestScoringHooksAndTick(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		tr, _ := startTracker(t, b, scoringSettings)
		d, err := tr.Describe(ctx)
		require.NoError(t, err)
		require.Equal(t, []plugins.ItemType{{Name: "score", Project: "bt-scoring", ItemPrefix: "score:",
			ReclaimTTL: 10 * time.Minute, Order: plugins.OrderScore, DoneMode: "count"}}, d.ItemTypes)
		require.Equal(t, []plugins.Job{{Name: "score", Period: 24 * time.Hour}, {Name: btplugin.RepairJob, Period: time.Hour}, {Name: btplugin.SweepJob, Period: 15 * time.Second}}, d.Jobs)

		hash := bittorrent.InfoHash{0x7e, 's', 't'}
		var id bittorrent.PeerID
		copy(id[:], "-GO0001-hooks0000001")
		_, err = tr.Store().Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: id,
			Addr: netip.MustParseAddrPort("10.9.9.9:6881")})
		require.NoError(t, err)
		cycle := time.Now()
		res, err := tr.OnTick(ctx, plugins.Tick{Job: "score", Scheduled: cycle, At: cycle})
		require.NoError(t, err)
		item, err := tr.Scorer().NextItem(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, []plugins.QueueItem{{Project: "bt-scoring", Item: item, Score: 1}}, res.Enqueue)

		ev := plugins.ItemEvent{ItemType: "score", Project: "bt-scoring", Item: item, Downloader: "scorer", At: time.Now()}
		for _, bad := range []string{``, `{"peers":"x"}`, `{"peers":1,"new":1}`, `{"peers":1,"new":1,"max":50,"extra":1}`} {
			ev.Result = json.RawMessage(bad)
			require.NoError(t, tr.OnItemDone(ctx, ev), "a result that can never apply is acknowledged: %s", bad)
		}
		rec, err := tr.Scorer().Record(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, 1.0, rec.Score, "bad results changed nothing")

		ev.Result = json.RawMessage(`{"peers":0,"new":0,"max":50}`)
		require.NoError(t, tr.OnItemDone(ctx, ev))
		require.NoError(t, tr.OnItemDone(ctx, ev), "delivered again")
		rec, err = tr.Scorer().Record(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, 0.5, rec.Score, "applied once")

		res, err = tr.OnTick(ctx, plugins.Tick{Job: "score", Scheduled: cycle, At: time.Now()})
		require.NoError(t, err)
		require.Empty(t, res.Enqueue, "the same cycle run again (the plugin died under it): its applied round is not queued again")

		res, err = tr.OnTick(ctx, plugins.Tick{Job: "score", Scheduled: cycle.Add(24 * time.Hour), At: time.Now()})
		require.NoError(t, err)
		next, err := tr.Scorer().NextItem(ctx, hash)
		require.NoError(t, err)
		_, first, _ := scoring.ParseItem(item)
		_, second, _ := scoring.ParseItem(next)
		require.Equal(t, first+1, second)
		require.Equal(t, []plugins.QueueItem{{Project: "bt-scoring", Item: next, Score: 0.5}}, res.Enqueue)
	})
}

// TestBadScoringSettingsAreRefused: each names its field, and the tracker
// keeps serving with its previous configuration.
func TestBadScoringSettingsAreRefused(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tr, addrs := startTracker(t, b, scoringSettings)
		for settings, field := range map[string]string{
			`{"scoring":{"enabled":true,"removal":"forget"}}`:     "removal",
			`{"scoring":{"enabled":true,"period":"0s"}}`:          "period",
			`{"scoring":{"enabled":true,"max_peers":-1}}`:         "max_peers",
			`{"scoring":{"enabled":true,"no_peers":-0.5}}`:        "no_peers",
			`{"scoring":{"enabled":true,"max_workers":-2}}`:       "max_workers",
			`{"scoring":{"enabld":true}}`:                         "enabld",
			`{"scoring":{"enabled":true,"tracker_timeout":"1h"}}`: "tracker_timeout",
			`{"scoring":{"enabled":true,"tracker_grace":-2}}`:     "tracker_grace",
			`{"scoring":{"enabled":true,"tracker_numwant":-5}}`:   "tracker_numwant",
			`{"scoring":{"enabled":true,"history":5000}}`:         "history",
		} {
			err := tr.Configure(t.Context(), plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(settings)})
			require.ErrorContains(t, err, field, settings)
		}
		d, err := tr.Describe(t.Context())
		require.NoError(t, err)
		require.Len(t, d.ItemTypes, 1, "still configured as before")
		require.Equal(t, addrs["http"], d.Listeners[0].Address)
	})
}

// TestScoringPolicyCarriesTheTargetAllowance: hoard serve's admin API
// reads the plugin's scoring policy, so it accepts the tracker addresses
// the plugin may announce to, and no others.
func TestScoringPolicyCarriesTheTargetAllowance(t *testing.T) {
	p, err := btplugin.ScoringPolicy(json.RawMessage(`{"scoring":{"enabled":true,"allowed_targets":["10.0.0.0/8"]}}`))
	require.NoError(t, err)
	scorer := scoring.New(nil, p, nil, quiet)
	_, err = scorer.CheckTrackers([]scoring.Tracker{{URL: "udp://10.1.2.3:6969/announce"}})
	require.NoError(t, err)
	_, err = scorer.CheckTrackers([]scoring.Tracker{{URL: "udp://127.0.0.1:6969/announce"}})
	require.ErrorContains(t, err, "127.0.0.1 is loopback")
	p, err = btplugin.ScoringPolicy(nil)
	require.NoError(t, err)
	_, err = scoring.New(nil, p, nil, quiet).CheckTrackers([]scoring.Tracker{{URL: "http://169.254.169.254/announce"}})
	require.ErrorContains(t, err, "link-local")
	_, err = btplugin.ScoringPolicy(json.RawMessage(`{"scoring":{"allowed_targets":["x"]}}`))
	require.ErrorContains(t, err, "allowed target 0")
}
