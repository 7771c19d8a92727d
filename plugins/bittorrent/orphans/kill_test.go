package orphans_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// killHelperEnv names the Redis URL a re-executed test binary runs
// cleanup passes against until it is killed; killNowEnv the time (ms)
// its clock shows.
const (
	killHelperEnv = "HOARD_ORPHANS_KILL_HELPER_URL"
	killNowEnv    = "HOARD_ORPHANS_KILL_HELPER_NOW"
)

// runKillHelper runs full cleanup passes for ever: the parent kills it
// with SIGKILL somewhere in the middle of one.
func runKillHelper(url string) {
	rdb, err := redisurl.Dial(url)
	for err == nil {
		ms, _ := strconv.ParseInt(os.Getenv(killNowEnv), 10, 64)
		now := time.UnixMilli(ms)
		var cleaner *orphans.Cleaner
		var store *swarm.Store
		if store, err = swarm.New(rdb, swarm.Config{Private: true}); err != nil {
			break
		}
		cleaner, err = orphans.New(rdb, orphans.Config{Store: store.Config(), Now: func() time.Time { return now },
			Policy: orphans.Policy{Window: window, ScanCount: 20, MaxKeysPerTick: 100}, Logger: quietLogger})
		for err == nil {
			_, err = cleaner.Pass(context.Background())
		}
	}
	fmt.Fprintln(os.Stderr, "kill helper:", err)
	os.Exit(2)
}

// startKillHelper starts this test binary again as a frontend running
// cleanup passes against b for ever, its clock at f's time.
func startKillHelper(t *testing.T, b redistest.Backend, f *fixture) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killHelperEnv+"="+b.URL, killNowEnv+"="+strconv.FormatInt(f.clock.Now().UnixMilli(), 10))
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd
}

// killHelper kills the helper with SIGKILL, wherever it is.
func killHelper(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
}

// TestKill9MidCleanup kills a frontend running cleanup with SIGKILL in the
// middle of a pass over many removed torrents: every torrent is then
// either whole or entirely gone (its record, users set and user records
// go in one script), an announce on a torrent registered again after its
// record went behaves like one on a fresh torrent, and the next pass
// finishes the work.
func TestKill9MidCleanup(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != "single" {
			t.Skipf("by design: the subprocess dials one server; the script's atomicity is the same on %s", b.Name)
		}
		f := newFixture(t, b, true)
		ctx := context.Background()
		const n = 600
		hashes := make([]bittorrent.InfoHash, n)
		for i := range n {
			hashes[i] = infoHash("killed" + strconv.Itoa(i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hashes[i], "k"+strconv.Itoa(i)))
			for u, user := range []string{"alice", "bob"} {
				require.NoError(t, f.announce(hashes[i], u+1, pkPrefix+user, 0, 0, bittorrent.EventStarted))
				require.NoError(t, f.announce(hashes[i], u+1, pkPrefix+user, 0, 5, bittorrent.EventStopped))
			}
			require.NoError(t, f.store.UnregisterTorrent(ctx, hashes[i]))
		}
		require.NoError(t, f.store.Flush(ctx))
		f.clock.Advance(window + time.Second)

		cmd := startKillHelper(t, b, f)
		records := func() int { return len(f.scan(btstore.TorrentRecordPattern)) }
		deadline := time.Now().Add(20 * time.Second)
		for records() > n*3/4 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		killHelper(t, cmd)
		left := records()
		t.Logf("killed with %d of %d torrent records left", left, n)
		require.Positive(t, left, "killed before the pass ended")
		require.Less(t, left, n, "killed after the pass began")

		// Nothing half-deleted: whole, or record and user records gone.
		var goneHash bittorrent.InfoHash
		for _, hash := range hashes {
			exists := b.Client.Exists(ctx, btstore.TorrentKey(hash)).Val() == 1
			users := b.Client.SMembers(ctx, btstore.TorrentUsersKey(hash)).Val()
			records := b.Client.Exists(ctx, btstore.UserTorrentKey(hash, "alice"), btstore.UserTorrentKey(hash, "bob")).Val()
			if exists {
				require.ElementsMatch(t, []string{"alice", "bob"}, users)
				require.Equal(t, int64(2), records)
			} else {
				require.Empty(t, users)
				require.Zero(t, records)
				if b.Client.Exists(ctx, btstore.PeerKey(hash, peerID(1))).Val() == 1 {
					goneHash = hash // its peer records wait for a later page
				}
			}
		}
		if goneHash != (bittorrent.InfoHash{}) {
			// Registered again, the old peer record is not taken for a
			// returning session: the peer starts afresh.
			f.clock.Advance(time.Second)
			require.NoError(t, f.store.RegisterTorrent(ctx, goneHash, "again"))
			require.NoError(t, f.announce(goneHash, 1, pkPrefix+"alice", 0, 5, bittorrent.EventNone))
			rec := b.Client.HGetAll(ctx, btstore.PeerKey(goneHash, peerID(1))).Val()
			require.Equal(t, strconv.FormatInt(f.clock.Now().UnixMilli(), 10), rec["first_announce"])
			require.Contains(t, []string{"", "0"}, b.Client.HGet(ctx, btstore.UserTorrentKey(goneHash, "alice"), "uploaded").Val(),
				"no transfer counted against the old session's counters")
			require.NoError(t, f.announce(goneHash, 1, pkPrefix+"alice", 0, 5, bittorrent.EventStopped))
			require.NoError(t, f.store.UnregisterTorrent(ctx, goneHash))
			f.clock.Advance(window + time.Second)
		} else {
			t.Log("no removed torrent had a peer record left at the kill; the fresh-announce check had nothing to act on")
		}

		f.pass()
		f.pass()
		require.Empty(t, f.scan(btstore.TorrentKeyPattern), "the next passes finished the work")
	})
}

// TestKill9MidUserPurge kills a frontend with SIGKILL while it purges a
// removed user with records on many torrents (the purge takes several
// passes): each torrent's users set names the user exactly when its
// record is still there, the user's entries cover every record left, and
// the next passes finish the purge without touching anyone else's.
func TestKill9MidUserPurge(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != "single" {
			t.Skipf("by design: the subprocess dials one server; the scripts' atomicity is the same on %s", b.Name)
		}
		f := newFixture(t, b, true)
		ctx := context.Background()
		const n = 3000
		require.NoError(t, f.store.AddUser(ctx, pkPrefix+"carol", "carol"))
		hashes := make([]bittorrent.InfoHash, n)
		for i := range n {
			hashes[i] = infoHash("purged" + strconv.Itoa(i))
			require.NoError(t, f.store.RegisterTorrent(ctx, hashes[i], "p"+strconv.Itoa(i)))
		}
		for _, user := range []string{"carol", "alice"} {
			for i, hash := range hashes {
				require.NoError(t, f.announce(hash, i, pkPrefix+user, 0, 0, bittorrent.EventStarted))
				require.NoError(t, f.announce(hash, i, pkPrefix+user, 0, 5, bittorrent.EventStopped))
			}
		}
		require.NoError(t, f.store.Flush(ctx))
		require.Equal(t, int64(n), b.Client.HLen(ctx, btstore.UserTorrentsKey("carol")).Val())
		require.NoError(t, f.store.RemoveUser(ctx, pkPrefix+"carol"))
		f.clock.Advance(window + time.Second)

		cmd := startKillHelper(t, b, f)
		entries := func() int64 { return b.Client.HLen(ctx, btstore.UserTorrentsKey("carol")).Val() }
		deadline := time.Now().Add(60 * time.Second)
		for entries() == n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		killHelper(t, cmd)
		left := 0
		for _, hash := range hashes {
			record := b.Client.Exists(ctx, btstore.UserTorrentKey(hash, "carol")).Val() == 1
			listed := b.Client.SIsMember(ctx, btstore.TorrentUsersKey(hash), "carol").Val()
			require.Equal(t, record, listed, "the users set names carol exactly when her record is there")
			if record {
				left++
				id := b.Client.HGet(ctx, btstore.TorrentKey(hash), "id").Val()
				require.Equal(t, btstore.HexInfoHash(hash), b.Client.HGet(ctx, btstore.UserTorrentsKey("carol"), id).Val(),
					"an entry still leads to every record left")
			}
		}
		t.Logf("killed with %d of %d of carol's records left", left, n)
		require.Positive(t, left, "killed before the purge ended")
		require.Less(t, left, n, "killed after the purge began")
		require.NotEmpty(t, b.Client.HGet(ctx, btstore.UserGoneKey("carol"), "purge_before").Val())

		// A pass purges up to 4 x 500 records of one user; the passes
		// after the kill finish it.
		passes := 0
		for b.Client.Exists(ctx, btstore.UserGoneKey("carol")).Val() == 1 {
			passes++
			require.LessOrEqual(t, passes, left/2000+1, "the purge goes on where it stopped")
			f.pass()
		}
		f.requireUserGone("carol", hashes[:50]...)
		require.Empty(t, f.scan(btstore.UserRecordsPattern("carol")), "none of her records on any torrent")
		for _, hash := range hashes[:50] {
			require.Equal(t, int64(1), b.Client.Exists(ctx, btstore.UserTorrentKey(hash, "alice")).Val())
		}
		require.Len(t, f.user("alice").Complete, n)
	})
}
