package swarm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// Records and totals an earlier build wrote with the credited transfer
// whole are converted when a store starts: every reader shows the same
// credited figures as before, a second conversion (the marker lost, or a
// start cut short and run again) changes nothing, and an announce after
// it credits on top of the converted figures.
func TestCreditFormConvertedAtStart(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		f, hash := privateFixture(t, b, swarm.Config{})
		other := infoHash("other")
		require.NoError(t, f.store.RegisterTorrent(ctx, other, "t2"))
		// As a build before s43 left them: alice credited double upload
		// and freeleech on hash, bob's record written with accounting off
		// (no credited fields: nothing credited), alice's totals.
		rdb := b.Client
		require.NoError(t, rdb.HSet(ctx, btstore.UserTorrentKey(hash, "alice"), "uploaded", 4000, "downloaded", 8000,
			"up_credit", 8000, "down_credit", 0, "seq", 3, "first_announce", 1).Err())
		require.NoError(t, rdb.HSet(ctx, btstore.UserTorrentKey(other, "alice"), "uploaded", 100, "downloaded", 200,
			"up_credit", 100, "down_credit", 200, "first_announce", 1).Err())
		require.NoError(t, rdb.HSet(ctx, btstore.UserTorrentKey(hash, "bob"), "uploaded", 50, "downloaded", 70,
			"first_announce", 1).Err())
		require.NoError(t, rdb.HSet(ctx, btstore.UserStatsKey("alice"), "uploaded", 4100, "downloaded", 8200,
			"up_credit", 8100, "down_credit", 200).Err())
		require.NoError(t, rdb.Del(ctx, btstore.CreditFormKey).Err())

		check := func() {
			t.Helper()
			a := f.onTorrent(hash, "alice")
			require.Equal(t, [4]int64{4000, 8000, 8000, 0}, [4]int64{a.Uploaded, a.Downloaded, a.UpCredited, a.DownCredited})
			require.Equal(t, int64(3), a.Seq)
			a2 := f.onTorrent(other, "alice")
			require.Equal(t, [4]int64{100, 200, 100, 200}, [4]int64{a2.Uploaded, a2.Downloaded, a2.UpCredited, a2.DownCredited})
			bob := f.onTorrent(hash, "bob")
			require.Equal(t, [4]int64{50, 70, 0, 0}, [4]int64{bob.Uploaded, bob.Downloaded, bob.UpCredited, bob.DownCredited})
			sum := f.user("alice")
			require.Equal(t, [4]int64{4100, 8200, 8100, 200}, [4]int64{sum.Uploaded, sum.Downloaded, sum.UpCredited, sum.DownCredited})
			for _, key := range []string{btstore.UserTorrentKey(hash, "alice"), btstore.UserTorrentKey(hash, "bob"),
				btstore.UserStatsKey("alice")} {
				n, err := rdb.HExists(ctx, key, "up_credit").Result()
				require.NoError(t, err)
				require.False(t, n, "%s keeps the whole credited figure", key)
			}
		}

		require.NoError(t, f.store.Start(ctx))
		require.NoError(t, f.store.Stop())
		form, err := rdb.Get(ctx, btstore.CreditFormKey).Result()
		require.NoError(t, err)
		require.Equal(t, btstore.CreditFormDone, form)
		check()

		// The marker lost: a second start converts nothing twice.
		require.NoError(t, rdb.Del(ctx, btstore.CreditFormKey).Err())
		again := newFixture(t, b, swarm.Config{Private: true})
		require.NoError(t, again.store.Start(ctx))
		require.NoError(t, again.store.Stop())
		check()

		// Crediting goes on from the converted figures: double upload
		// credits the next 1000 twice, the download at the normal rate.
		require.NoError(t, f.store.SetTorrentCredit(ctx, other, swarm.Credit{Kind: swarm.CreditDoubleUpload}))
		me := peerID("-TR", 1)
		f.announce(other, me, 1, passkey("passkeyA"), event(bittorrent.EventStarted))
		f.announce(other, me, 1, passkey("passkeyA"), transfer(1000, 500))
		got := f.onTorrent(other, "alice")
		require.Equal(t, [4]int64{1100, 700, 2100, 700}, [4]int64{got.Uploaded, got.Downloaded, got.UpCredited, got.DownCredited})
		require.NoError(t, f.store.Flush(ctx))
		sum := f.user("alice")
		require.Equal(t, [4]int64{5100, 8700, 10100, 700}, [4]int64{sum.Uploaded, sum.Downloaded, sum.UpCredited, sum.DownCredited})
	})
}
