package reaper_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
)

func TestSettingsDefaultsAndBadInput(t *testing.T) {
	_, p, err := reaper.ParseSettings(nil, false)
	require.NoError(t, err, "off needs nothing")
	require.Equal(t, 8*time.Hour+48*time.Hour+24*time.Hour, p.Never.Total(), "never seeded: removed 3 days 8 h after upload")
	require.Equal(t, 480*time.Hour+648*time.Hour+72*time.Hour, p.Unseeded.Total(), "unseeded: 50 days after the last seeder")
	require.Equal(t, 720*time.Hour, p.Unseeded.Final+p.Unseeded.Removal, "Orpheus's REMOVE_UNSEEDED_HOUR, from the initial notice")
	require.Equal(t, []int{200, 2500, 4000}, []int{p.MaxPerUser, p.MaxUsers, p.MaxTotal})

	s, p, err := reaper.ParseSettings(json.RawMessage(`{"enabled":true,"never_grace":"1h","max_total":10}`), true)
	require.NoError(t, err)
	require.True(t, s.Enabled)
	require.Equal(t, time.Hour, p.Never.Grace)
	require.Equal(t, 10, p.MaxTotal)

	for raw, says := range map[string]string{
		`{"enabled":true}`:             "needs private mode",
		`{"never_grace":"-1h"}`:        "never_grace",
		`{"unseeded_final":"soon"}`:    "unseeded_final",
		`{"max_per_user":-1}`:          "max_per_user",
		`{"max_workers":-2}`:           "max_workers",
		`{"grace_days":3}`:             "unknown field",
		`{"period":"0s"}`:              "period",
		`{"unseeded_removal":"72"}`:    "unseeded_removal",
		`{"enabled":true,"project":1}`: "cannot unmarshal",
	} {
		_, _, err := reaper.ParseSettings(json.RawMessage(raw), raw == `{"enabled":true,"project":1}`)
		require.ErrorContains(t, err, says, raw)
	}
}

func TestParseItemRefusesMalformedNames(t *testing.T) {
	hash := bittorrent.InfoHash{1, 2, 3}
	it := reaper.Item{Step: reaper.NotifyFinal, InfoHash: hash, Epoch: 1234}
	back, err := reaper.ParseItem(it.Name())
	require.NoError(t, err)
	require.Equal(t, it, back)
	for _, bad := range []string{"", "notify-final", "notify-final:" + btstore.HexInfoHash(hash),
		"purge:" + btstore.HexInfoHash(hash) + ":1", "remove:nothex:1", "remove:" + btstore.HexInfoHash(hash) + ":-1",
		"remove:" + btstore.HexInfoHash(hash) + ":x", "remove:" + btstore.HexInfoHash(hash) + ":1:2"} {
		_, err := reaper.ParseItem(bad)
		require.ErrorIs(t, err, reaper.ErrInvalid, bad)
	}
}

// A queued step whose item is lost is queued again after RequeueAfter,
// not before; a removal whose registry cleanup failed is retried by the
// next run, and the torrent is refused by announces from the removal on.
func TestRequeueAndFailedUnregisterRetry(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		p := reaper.DefaultPolicy()
		p.Never = reaper.Schedule{Grace: time.Hour, Final: time.Hour, Removal: time.Hour}
		f := newFixture(t, b, p)
		failing := true
		f.reaper = reaper.New(b.Client, reaper.Config{Policy: p, Now: f.clock.Now, Logger: quiet,
			Unregister: func(ctx context.Context, hash bittorrent.InfoHash) error {
				if failing {
					return errors.New("registry unreachable")
				}
				return f.store.UnregisterTorrent(ctx, hash)
			}})
		hash := f.register("lost", "u")
		f.clock.Advance(time.Hour + time.Millisecond)
		require.Equal(t, []string{item(reaper.NotifyInitial, hash, f.clock.Now().UnixMilli())}, f.tick())
		f.clock.Advance(p.RequeueAfter - time.Millisecond)
		require.Empty(t, f.tick(), "still queued")
		f.clock.Advance(time.Millisecond)
		initial := item(reaper.NotifyInitial, hash, f.clock.Now().UnixMilli())
		require.Equal(t, []string{initial}, f.tick(), "lost: queued again, under a new name")
		f.apply(initial)
		generation := f.clock.Now().UnixMilli()
		for _, step := range []reaper.Step{reaper.NotifyFinal, reaper.Remove} {
			f.clock.Advance(time.Hour + time.Millisecond)
			require.True(t, f.apply(item(step, hash, generation)).Done)
		}
		registry, err := b.Client.HExists(f.ctx, btstore.RegistryKey, btstore.HexInfoHash(hash)).Result()
		require.NoError(t, err)
		require.True(t, registry, "the cleanup failed")
		info, err := f.store.Torrent(f.ctx, hash)
		require.NoError(t, err)
		require.Empty(t, info.ID, "but announces are refused from the removal on")

		failing = false
		require.Empty(t, f.plan(), "nothing more to do for a removed torrent")
		registry, err = b.Client.HExists(f.ctx, btstore.RegistryKey, btstore.HexInfoHash(hash)).Result()
		require.NoError(t, err)
		require.False(t, registry, "the next run retried the cleanup")
	})
}
