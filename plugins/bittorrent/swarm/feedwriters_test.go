package swarm_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// killedChange is one change a killed frontend answered.
type killedChange struct {
	hash     bittorrent.InfoHash
	n        int
	user     string
	up, down uint64
}

// killFrontend has a frontend answer changes of two users on two torrents
// and "kills" it with the feed's rows of those changes only in its memory:
// it is never started, so it never beats again, and it writes no row to
// Redis (S5). It returns the
// frontend's id and its changes.
func killFrontend(t *testing.T, b redistest.Backend) (string, []killedChange) {
	t.Helper()
	ctx := context.Background()
	killed, hash := privateFixture(t, b, swarm.Config{FlushInterval: 50 * time.Millisecond,
		OnFeed: func(context.Context, []swarm.FeedBatch) error { return nil }})
	// What its Start would have done: the records are in the form of
	// this build (else a live frontend's Start converts them again).
	require.NoError(t, b.Client.Set(ctx, btstore.CreditFormKey, btstore.CreditFormDone, 0).Err())
	other := infoHash("other")
	require.NoError(t, killed.store.RegisterTorrent(ctx, other, "t2"))
	changes := []killedChange{{hash, 1, "alice", 1000, 0}, {hash, 2, "bob", 2000, 500}, {other, 3, "alice", 0, 700}}
	passkeys := map[string]string{"alice": "passkeyA", "bob": "passkeyB"}
	for _, c := range changes {
		killed.announce(c.hash, peerID("-TR", c.n), c.n, passkey(passkeys[c.user]))
	}
	killed.clock.Advance(time.Minute)
	for _, c := range changes {
		killed.announce(c.hash, peerID("-TR", c.n), c.n, passkey(passkeys[c.user]), transfer(c.up, c.down))
	}
	killed.flush()
	require.Equal(t, 3, killed.store.FeedRowsHeld(), "the rows are only in its memory")
	noFeedRowsInRedis(t, b, hash, other)
	return killed.store.Owner(), changes
}

// equalsRecords tells whether the ledger's newest row of each change is
// its record (seq, raw and credited figures).
func (l *ledger) equalsRecords(t *testing.T, b redistest.Backend, changes []killedChange) bool {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range changes {
		record := b.Client.HMGet(context.Background(), btstore.UserTorrentKey(c.hash, c.user),
			"seq", "uploaded", "downloaded").Val()
		figures := make([]int64, len(record))
		for i, v := range record {
			if v != nil { // a figure never written is 0
				figures[i], _ = strconv.ParseInt(v.(string), 10, 64)
			}
		}
		row, ok := l.newest[c.user+":"+btstore.HexInfoHash(c.hash)]
		if !ok || row.Seq == 0 || row.Seq != figures[0] || row.Uploaded != figures[1] || row.Downloaded != figures[2] ||
			row.Uploaded != int64(c.up) || row.Downloaded != int64(c.down) || row.UpCredited != int64(c.up) {
			return false
		}
	}
	return true
}

// A frontend killed with its changes' rows only in its memory leaves
// records stamped with its id: once its heartbeat expired, another
// frontend's FeedDeadWriters delivers every record it changed since its
// "fed up to" as the record's row, so the site's ledger equals the
// records, and forgets it; a second call finds no dead frontend and sends
// nothing.
func TestFeedDeadWritersDeliversAKilledFrontendsRecords(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		id, changes := killFrontend(t, b)
		live := newFixture(t, b, swarm.Config{Private: true, OnFeed: func(context.Context, []swarm.FeedBatch) error { return nil }})
		require.Eventually(t, func() bool {
			dead, err := live.store.DeadFrontends(ctx)
			require.NoError(t, err)
			_, ok := dead[id]
			return ok
		}, 10*time.Second, 20*time.Millisecond, "the killed frontend's heartbeat expires")

		l := newLedger()
		rows, err := live.store.FeedDeadWriters(ctx, l.deliver)
		require.NoError(t, err)
		require.Equal(t, len(changes), rows)
		require.True(t, l.equalsRecords(t, b, changes), "the ledger's rows are the records: %v", l.newest)
		require.False(t, b.Client.HExists(ctx, btstore.FrontendsKey, id).Val(), "forgotten once delivered")

		rows, err = live.store.FeedDeadWriters(ctx, l.deliver)
		require.NoError(t, err)
		require.Zero(t, rows)
	})
}

// The same through a live frontend's feed loop: its rounds see the killed
// frontend's heartbeat gone and deliver its records, with no call from
// outside; the site's ledger ends equal to the records.
func TestFeedLoopDeliversAKilledFrontendsRecordsOnceItsHeartbeatExpires(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		id, changes := killFrontend(t, b)
		l := newLedger()
		live := newFixture(t, b, swarm.Config{Private: true, FeedInterval: 50 * time.Millisecond, OnFeed: l.deliver})
		require.NoError(t, live.store.Start(ctx))
		require.Eventually(t, func() bool {
			return l.equalsRecords(t, b, changes) && !b.Client.HExists(ctx, btstore.FrontendsKey, id).Val()
		}, 15*time.Second, 20*time.Millisecond, "the killed frontend's records reach the ledger")
	})
}

// The lead's decision 5 on the purge path: a purge step that deletes
// records returns the rows of those whose writer's "fed up to" is before
// their last change, and delivers them before it reports the records
// gone, so a writer killed with the rows only in its memory loses none
// even when the delete comes before any backstop; a record whose writer
// is fed up to after its change is not sent again.
func TestAPurgeDeliversTheRowsOfRecordsAKilledWriterHeld(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		id, changes := killFrontend(t, b)
		l := newLedger()
		live := newFixture(t, b, swarm.Config{Private: true, OnFeed: l.deliver})
		seqs := map[string]int64{}
		for _, c := range changes {
			seq, err := b.Client.HGet(ctx, btstore.UserTorrentKey(c.hash, c.user), "seq").Int64()
			require.NoError(t, err)
			seqs[c.user+":"+btstore.HexInfoHash(c.hash)] = seq
		}
		// The killed frontend's peers time out (their records keep their
		// seq: expiry numbers no change), so the records can go.
		live.clock.Advance(3 * time.Hour)
		for _, c := range changes {
			removed, err := swarm.ExpireMember(ctx, live.store, c.hash, peerID("-TR", c.n), c.user)
			require.NoError(t, err)
			require.Equal(t, int64(1), removed)
		}
		const window = time.Hour
		purge := func(user, passkeyName string, records int) {
			require.NoError(t, live.store.RemoveUser(ctx, pk(passkeyName)))
			live.clock.Advance(window + time.Second)
			now := live.clock.Now().UnixMilli()
			state, err := live.store.StartUserPurge(ctx, user, now, window.Milliseconds(), now-1)
			require.NoError(t, err)
			require.Equal(t, "purging", state.State)
			progress, err := live.store.PurgeUserStep(ctx, user, state.PurgeBefore)
			require.NoError(t, err)
			require.Equal(t, records, progress.Records)
		}
		purge("alice", "passkeyA", 2)
		l.mu.Lock()
		for _, c := range changes {
			at := c.user + ":" + btstore.HexInfoHash(c.hash)
			row, ok := l.newest[at]
			if c.user != "alice" {
				require.False(t, ok, at)
				continue
			}
			require.True(t, ok, "the deleted record's row reached the ledger: %s", at)
			require.Equal(t, seqs[at], row.Seq)
			require.Equal(t, int64(c.up), row.Uploaded)
			require.Equal(t, int64(c.down), row.Downloaded)
			require.Equal(t, int64(c.up), row.UpCredited)
		}
		l.mu.Unlock()

		// bob's writer fed up to after his change: his row is not sent.
		require.NoError(t, b.Client.HSet(ctx, btstore.FrontendsKey, id, live.clock.Now().UnixMilli()).Err())
		purge("bob", "passkeyB", 1)
		l.mu.Lock()
		defer l.mu.Unlock()
		require.Len(t, l.seen, 2, "alice's two rows only")
	})
}

// Decision 5 on the operator's PurgeTorrent (no window at all): the rows
// of the users' records it deletes whose writer's "fed up to" is before
// their last change are delivered before it returns, so a writer killed
// with them only in its memory loses none.
func TestPurgeTorrentDeliversTheRowsOfRecordsAKilledWriterHeld(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		_, changes := killFrontend(t, b)
		l := newLedger()
		live := newFixture(t, b, swarm.Config{Private: true, OnFeed: l.deliver})
		live.clock.Advance(3 * time.Hour)
		var torrent bittorrent.InfoHash
		var want killedChange
		for _, c := range changes {
			if c.user == "alice" && c.n == 3 { // alice alone on the second torrent
				torrent, want = c.hash, c
			}
		}
		seq, err := b.Client.HGet(ctx, btstore.UserTorrentKey(torrent, "alice"), "seq").Int64()
		require.NoError(t, err)
		removed, err := swarm.ExpireMember(ctx, live.store, torrent, peerID("-TR", want.n), "alice")
		require.NoError(t, err)
		require.Equal(t, int64(1), removed)
		n, err := live.store.PurgeTorrent(ctx, torrent, "")
		require.NoError(t, err)
		require.Positive(t, n)
		require.Zero(t, b.Client.Exists(ctx, btstore.UserTorrentKey(torrent, "alice")).Val(), "the record went")
		l.mu.Lock()
		defer l.mu.Unlock()
		row, ok := l.newest["alice:"+btstore.HexInfoHash(torrent)]
		require.True(t, ok, "the deleted record's row reached the ledger")
		require.Equal(t, seq, row.Seq)
		require.Equal(t, int64(want.down), row.Downloaded)
		require.Equal(t, int64(want.down), row.DownCredited)
		require.Len(t, l.seen, 1, "only the purged torrent's record")
	})
}
