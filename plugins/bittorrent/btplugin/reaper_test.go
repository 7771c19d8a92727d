package btplugin_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"
)

const reaperSettings = `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m",
	"reaper":{"enabled":true,"period":"24h"}}`

// TestReaperHooksAndTick: the three item types and the job are described;
// a tick with no host API returns the due step itself; OnItemDone applies
// it once and acknowledges a malformed item; the reaper needs private mode.
func TestReaperHooksAndTick(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		tr, _ := startTracker(t, b, reaperSettings)
		d, err := tr.Describe(ctx)
		require.NoError(t, err)
		var names []string
		for _, it := range d.ItemTypes {
			names = append(names, it.Name+"="+it.Project+"/"+it.ItemPrefix)
		}
		require.Equal(t, []string{"notify-initial=bt-reaper/notify-initial:", "notify-final=bt-reaper/notify-final:",
			"remove=bt-reaper/remove:"}, names)
		require.Equal(t, []plugins.Job{{Name: "reaper", Period: 24 * time.Hour}, {Name: btplugin.RepairJob, Period: time.Hour}, {Name: btplugin.SweepJob, Period: 15 * time.Second}}, d.Jobs)

		hash := bittorrent.InfoHash{0x4e, 'v', 'r'}
		require.NoError(t, tr.Store().Register(ctx, hash, swarm.Registration{ID: "1", Uploader: "u1",
			Created: time.Now().Add(-9 * time.Hour)}))
		res, err := tr.OnTick(ctx, plugins.Tick{Job: "reaper", Scheduled: time.Now(), At: time.Now(), Missed: 180})
		require.NoError(t, err)
		require.Len(t, res.Enqueue, 1)
		require.Equal(t, "bt-reaper", res.Enqueue[0].Project)
		name := res.Enqueue[0].Item
		it, err := reaper.ParseItem(name)
		require.NoError(t, err)
		require.Equal(t, reaper.NotifyInitial, it.Step)
		require.Equal(t, hash, it.InfoHash)

		ev := plugins.ItemEvent{ItemType: "notify-initial", Project: "bt-reaper", Item: "notify-initial:zz:1", At: time.Now()}
		require.NoError(t, tr.OnItemDone(ctx, ev), "a malformed item is acknowledged")
		ev.Item = name
		require.NoError(t, tr.OnItemDone(ctx, ev))
		require.NoError(t, tr.OnItemDone(ctx, ev), "delivered again")
		s, err := tr.Reaper().State(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "never", s.State)
		require.Equal(t, "initial", s.Notify)

		p, err := btplugin.New(ctx, quiet)
		require.NoError(t, err)
		err = p.Configure(ctx, plugins.Config{Name: "bittorrent", RedisURL: b.URL,
			Settings: json.RawMessage(`{"reaper":{"enabled":true}}`)})
		require.ErrorContains(t, err, "needs private mode")
	})
}

// TestReaperRunsOnThePluginPlatform: in a real host over the real queue
// engine, the "reaper" job's first tick queues the initial notice of an
// upload never seeded past its grace; the plugin's own workers claim it
// and apply it, and the done reaches the queue.
func TestReaperRunsOnThePluginPlatform(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		hash := bittorrent.InfoHash{0x4e, 'v', 'r', '2'}
		admin, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, admin.Register(ctx, hash, swarm.Registration{ID: "2", Uploader: "u1",
			Created: time.Now().Add(-9 * time.Hour)}))

		engine, _, tr := hostTracker(t, b, reaperSettings)

		require.Eventually(t, func() bool {
			counts, err := engine.Counts(ctx, reaper.DefaultProject)
			return err == nil && counts.Done == 1
		}, 20*time.Second, 10*time.Millisecond)
		s, err := tr.Reaper().State(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "initial", s.Notify)
		require.Empty(t, s.Pending, "the done cleared the pending mark")
		// The done's hook applies the step again (changing nothing); let
		// it run before truncating, or it would start the process again
		// from its own (stale, but still due) initial notice, and the
		// tick below would find nothing to do.
		waitEventsHandled(t, b, reaper.DefaultProject)

		// Truncation restarts the process through the real queue, which
		// skips names it has seen done: the new initial notice has its own.
		require.NoError(t, b.Client.Del(ctx, btstore.ReaperKey(hash)).Err())
		_, err = tr.OnTick(ctx, plugins.Tick{Job: btplugin.ReaperJob, Scheduled: time.Now(), At: time.Now()})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			counts, err := engine.Counts(ctx, reaper.DefaultProject)
			return err == nil && counts.Done == 2
		}, 20*time.Second, 10*time.Millisecond)
		s, err = tr.Reaper().State(ctx, hash)
		require.NoError(t, err)
		require.Equal(t, "initial", s.Notify)
	})
}

type recordingPublisher struct {
	mu     sync.Mutex
	events []reaper.Event
}

func (p *recordingPublisher) Publish(_ context.Context, events []reaper.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, events...)
	return nil
}

// TestReaperPublishesAndCounts: the publisher set before Configure gets
// the run's notice; the claim window reaches the announce path; Stats
// carries the reaper's counts by state and step.
func TestReaperPublishesAndCounts(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		p, err := btplugin.New(ctx, quiet)
		require.NoError(t, err)
		tr := p.(*btplugin.Tracker)
		pub := &recordingPublisher{}
		tr.SetReaperPublisher(pub)
		settings := `{"mode":"private","http":"127.0.0.1:0","udp4":"","udp6":"","interval":"1m",
			"reaper":{"enabled":true,"period":"24h","claim_window":"7m"}}`
		require.NoError(t, tr.Configure(ctx, plugins.Config{Name: "bittorrent", RedisURL: b.URL, Settings: json.RawMessage(settings)}))
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		require.Equal(t, 7*time.Minute, tr.Store().Config().ReaperClaimWindow)

		hash := bittorrent.InfoHash{0x4e, 'v', 'r', '3'}
		require.NoError(t, tr.Store().Register(ctx, hash, swarm.Registration{ID: "3", Uploader: "u1",
			Created: time.Now().Add(-9 * time.Hour)}))
		res, err := tr.OnTick(ctx, plugins.Tick{Job: btplugin.ReaperJob, Scheduled: time.Now(), At: time.Now()})
		require.NoError(t, err)
		require.Len(t, res.Enqueue, 1)
		require.NoError(t, tr.OnItemDone(ctx, plugins.ItemEvent{ItemType: "notify-initial", Project: "bt-reaper", Item: res.Enqueue[0].Item, At: time.Now()}))
		pub.mu.Lock()
		require.Len(t, pub.events, 1)
		require.Equal(t, reaper.KindNotice, pub.events[0].Kind)
		pub.mu.Unlock()

		stats, err := tr.Stats(ctx)
		require.NoError(t, err)
		got := map[string]float64{}
		for _, m := range stats.Metrics {
			if m.Name == "reaper_steps" {
				got["step/"+m.Labels["step"]] = m.Value
			}
			if m.Name == "reaper_torrents" {
				got[m.Labels["state"]+"/"+m.Labels["notify"]] = m.Value
			}
		}
		require.Equal(t, 1.0, got["step/initial"])
		require.Equal(t, 1.0, got["step/notices"])
		require.Equal(t, 0.0, got["never/initial"], "states are counted by the run, which found none yet")
		require.Contains(t, got, "unseeded/final")
	})
}

// waitEventsHandled waits until every consumer group of the project's
// event log has read and acknowledged every entry: each done's hook ran.
func waitEventsHandled(t *testing.T, b redistest.Backend, project string) {
	t.Helper()
	require.Eventually(t, func() bool {
		groups, err := b.Client.XInfoGroups(t.Context(), queues.EventsKey(project)).Result()
		if err != nil || len(groups) == 0 {
			return false
		}
		for _, g := range groups {
			if g.Pending != 0 || g.Lag != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
}
