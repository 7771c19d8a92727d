package scoring_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/announcer/opentrackertest"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// registered registers a torrent (so its own swarm is empty) and tracks
// it at 1.0.
func (f *fixture) registered(name string) bittorrent.InfoHash {
	f.t.Helper()
	hash := infoHash(name)
	require.NoError(f.t, f.store.Register(f.t.Context(), hash, swarm.Registration{ID: "1"}))
	ok, err := f.scorer.Track(f.t.Context(), hash)
	require.NoError(f.t, err)
	require.True(f.t, ok)
	return hash
}

// round does what a worker and OnItemDone do for one round: process
// (count the own swarm, announce to the external trackers), then apply.
func (f *fixture) round(hash bittorrent.InfoHash, round int64) scoring.Result {
	f.t.Helper()
	item := f.item(hash, round)
	raw, err := f.scorer.Process(f.t.Context(), item)
	require.NoError(f.t, err)
	r, err := scoring.ParseResult(raw)
	require.NoError(f.t, err)
	_, err = f.scorer.Apply(f.t.Context(), item, r)
	require.NoError(f.t, err)
	return r
}

func (f *fixture) view(hash bittorrent.InfoHash) scoring.View {
	f.t.Helper()
	v, err := f.scorer.View(f.t.Context(), hash)
	require.NoError(f.t, err)
	return v
}

// lineOf is a source's score line (-1 before its first round).
func lineOf(v scoring.View, source string) float64 {
	for _, s := range v.Sources {
		if s.Source == source {
			if s.Line == nil {
				return -1
			}
			return *s.Line
		}
	}
	return math.NaN()
}

func (f *fixture) setTrackers(hash bittorrent.InfoHash, trackers ...scoring.Tracker) {
	f.t.Helper()
	_, _, err := f.scorer.SetTrackers(f.t.Context(), hash, trackers)
	require.NoError(f.t, err)
}

// TestExternalTrackerPolicy: Debian's opentracker on 127.0.0.1 is the
// external tracker, with fake peers announced to it over UDP from
// loopback addresses. Each policy branch moves the tracker's own line:
// no peers ×0.5, some ×0.8, full (max 50) with at least 5% of max new
// ×1.2, full with too few new ×0.8; new means not seen from that tracker
// on that torrent within 30 days. The own swarm (empty: registered only)
// has its line, and the rank is the best line.
func TestExternalTrackerPolicy(t *testing.T) {
	none, few, full := infoHash("ext none"), infoHash("ext few"), infoHash("ext full")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ot := opentrackertest.Start(t, [][20]byte{none, few, full})
		ot.Announce(t, few, 0, 10)
		ot.Announce(t, full, 100, 60)
		f := newFixture(t, b, false, `{"tracker_timeout":"3s"}`)
		for _, name := range []string{"ext none", "ext few", "ext full"} {
			hash := f.registered(name)
			f.setTrackers(hash, scoring.Tracker{URL: ot.UDPURL()})
		}
		udp := ot.UDPURL()

		r := f.round(none, 1)
		require.Equal(t, []scoring.TrackerResult{{URL: udp, Max: 50}}, r.Trackers)
		v := f.view(none)
		require.InDelta(t, 0.5, lineOf(v, udp), 1e-12, "no peers at the tracker")
		require.InDelta(t, 0.5, lineOf(v, "swarm"), 1e-12, "no peers in the own swarm")
		require.InDelta(t, 0.5, v.Score, 1e-12)

		r = f.round(few, 1)
		require.Equal(t, []scoring.TrackerResult{{URL: udp, Peers: 10, New: 10, Max: 50}}, r.Trackers)
		v = f.view(few)
		require.InDelta(t, 0.8, lineOf(v, udp), 1e-12, "10 of max 50")
		require.InDelta(t, 0.8, v.Score, 1e-12, "the rank is the best line: the tracker's 0.8 over the swarm's 0.5")
		require.True(t, v.Indexed)
		require.InDelta(t, 0.8, f.record(few).IndexedAt, 1e-12, "the index shows the best line")

		r = f.round(full, 1)
		require.Equal(t, []scoring.TrackerResult{{URL: udp, Peers: 60, New: 60, Max: 50}}, r.Trackers)
		require.InDelta(t, 1.2, lineOf(f.view(full), udp), 1e-12, "full and all new")

		r = f.round(full, 2)
		require.Equal(t, []scoring.TrackerResult{{URL: udp, Peers: 60, New: 0, Max: 50}}, r.Trackers, "seen last round")
		require.InDelta(t, 1.2*0.8, lineOf(f.view(full), udp), 1e-12, "full, too few new")

		// Two new peers are 4% of 50: too few; three are 6%.
		ot.Announce(t, full, 160, 2)
		r = f.round(full, 3)
		require.Equal(t, scoring.TrackerResult{URL: udp, Peers: 62, New: 2, Max: 50}, r.Trackers[0])
		require.InDelta(t, 1.2*0.8*0.8, lineOf(f.view(full), udp), 1e-12, "2 new < 5% of 50")
		ot.Announce(t, full, 162, 3)
		r = f.round(full, 4)
		require.Equal(t, scoring.TrackerResult{URL: udp, Peers: 65, New: 3, Max: 50}, r.Trackers[0])
		require.InDelta(t, 1.2*0.8*0.8*1.2, lineOf(f.view(full), udp), 1e-12, "3 new >= 5% of 50")

		// 30 days on, every IP is new again.
		f.clock.Advance(30*24*time.Hour + time.Second)
		r = f.round(full, 5)
		require.Equal(t, scoring.TrackerResult{URL: udp, Peers: 65, New: 65, Max: 50}, r.Trackers[0])

		// A repeated report of round 5 changes nothing.
		before := f.view(full)
		out, err := f.scorer.Apply(t.Context(), f.item(full, 5), r)
		require.NoError(t, err)
		require.Equal(t, scoring.NotApplied, out)
		require.Equal(t, before, f.view(full))
		require.Len(t, before.History, 5)
		require.Equal(t, int64(5), before.History[0].Round, "newest first")
		require.Equal(t, "swarm", before.History[0].Sources[0].Source)
		require.Equal(t, udp, before.History[0].Sources[1].Source)
		require.Equal(t, int64(65), before.History[0].Sources[1].Peers)
	})
}

// TestTrackerMaxPeersAndLines: a tracker's max peers is its own (200:
// 60 peers are "some", not full); the same tracker over UDP and HTTP are
// two sources with a line each; a tracker taken off the torrent loses its
// line and no longer counts in the rank.
func TestTrackerMaxPeersAndLines(t *testing.T) {
	hash := infoHash("two lines")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ot := opentrackertest.Start(t, [][20]byte{hash})
		ot.Announce(t, hash, 0, 60)
		f := newFixture(t, b, false, `{"tracker_timeout":"3s"}`)
		f.registered("two lines")
		f.setTrackers(hash, scoring.Tracker{URL: ot.UDPURL(), MaxPeers: 200}, scoring.Tracker{URL: ot.HTTPURL()})
		f.round(hash, 1)
		v := f.view(hash)
		require.InDelta(t, 0.8, lineOf(v, ot.UDPURL()), 1e-12, "60 of max 200")
		require.InDelta(t, 1.2, lineOf(v, ot.HTTPURL()), 1e-12, "60 of max 50, all new")
		require.InDelta(t, 1.2, v.Score, 1e-12)
		require.Len(t, v.Sources, 3)

		f.setTrackers(hash, scoring.Tracker{URL: ot.UDPURL(), MaxPeers: 200})
		f.round(hash, 2)
		v = f.view(hash)
		require.InDelta(t, 0.64, lineOf(v, ot.UDPURL()), 1e-12)
		require.InDelta(t, 0.64, v.Score, 1e-12, "the HTTP line went with its tracker")
		rec, err := b.Client.HGetAll(t.Context(), btstore.ScoreKey(hash)).Result()
		require.NoError(t, err)
		for field := range rec {
			require.NotContains(t, field, btstore.SourceID(ot.HTTPURL()))
		}
	})
}

// TestHangingTrackerKeepsItsLine: a UDP socket on 127.0.0.1 that never
// answers times out (tracker_timeout) and its line is kept for
// tracker_grace rounds in a row, then each failed round counts as no
// peers. A down external tracker does not decay every torrent at once;
// one gone for good does not pin them forever. An answer resets the
// count.
func TestHangingTrackerKeepsItsLine(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	url := "udp://" + silent.LocalAddr().String() + "/announce"
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"tracker_timeout":"200ms","tracker_grace":2}`)
		hash := f.registered("hanging")
		f.setTrackers(hash, scoring.Tracker{URL: url})
		for round := int64(1); round <= 2; round++ {
			r := f.round(hash, round)
			require.Contains(t, r.Trackers[0].Error, "no reply in time")
			v := f.view(hash)
			require.Equal(t, 1.0, lineOf(v, url), "round %d: kept within the grace", round)
			require.Equal(t, int(round), v.Sources[1].Fails)
			require.Contains(t, v.Sources[1].Error, "no reply in time")
			require.Equal(t, 1.0, v.Score, "the rank is the kept line")
		}
		f.round(hash, 3)
		require.InDelta(t, 0.5, lineOf(f.view(hash), url), 1e-12, "past the grace, a failure is no peers")
		require.InDelta(t, 0.5, f.view(hash).Score, 1e-12)
	})
}

// TestTrackersAreChecked: bad lists are refused whole and change nothing.
func TestTrackersAreChecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		hash := infoHash("checked")
		good := scoring.Tracker{URL: "udp://127.0.0.1:1/announce", MaxPeers: 200}
		f.setTrackers(hash, good)
		for _, bad := range [][]scoring.Tracker{
			{{URL: "ftp://127.0.0.1:1/x"}},
			{good, {URL: "udp://127.0.0.1/announce"}},
			{{URL: "http://127.0.0.1:1/a", MaxPeers: 1001}},
			{{URL: "http://127.0.0.1:1/a", MaxPeers: -1}},
			{good, good},
			make([]scoring.Tracker, 17),
		} {
			_, _, err := f.scorer.SetTrackers(t.Context(), hash, bad)
			require.ErrorIs(t, err, scoring.ErrInvalid)
			got, err := f.scorer.Trackers(t.Context(), hash)
			require.NoError(t, err)
			require.Equal(t, []scoring.Tracker{good}, got, "nothing changed")
		}
		list, before, err := f.scorer.SetTrackers(t.Context(), hash, []scoring.Tracker{{URL: "http://127.0.0.1:1/announce?pk=1"}})
		require.NoError(t, err)
		require.Equal(t, 1, before)
		require.Equal(t, []scoring.Tracker{{URL: "http://127.0.0.1:1/announce?pk=1", MaxPeers: 50}}, list, "max peers defaults to 50")
		// The list's stamp (orphan cleanup's timestamp of interest) is the
		// time of the last write, beside the list, not in it.
		f.clock.Advance(time.Minute)
		_, _, err = f.scorer.SetTrackers(t.Context(), hash, []scoring.Tracker{{URL: "http://127.0.0.1:1/announce?pk=1"}})
		require.NoError(t, err)
		require.Equal(t, strconv.FormatInt(f.clock.Now().UnixMilli(), 10), b.Client.Get(t.Context(), btstore.ScoreTrackersAtKey(hash)).Val())
		_, _, err = f.scorer.SetTrackers(t.Context(), hash, nil)
		require.NoError(t, err)
		got, err := f.scorer.Trackers(t.Context(), hash)
		require.NoError(t, err)
		require.Empty(t, got)
		require.Zero(t, b.Client.Exists(t.Context(), btstore.ScoreTrackersKey(hash), btstore.ScoreTrackersAtKey(hash)).Val(), "cleared: no stamp either")
	})
}

// TestTopMergesTheShards: the top torrents by score across every index
// shard, best first.
func TestTopMergesTheShards(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, "")
		want := map[string]float64{}
		for i := range 40 {
			hash := f.registered(strings.Repeat("t", i+1))
			// Rounds without peers: torrent i ends at 0.5^(i%5).
			for round := int64(1); round <= int64(i%5); round++ {
				f.round(hash, round)
			}
			want[hexOf(hash)] = math.Pow(0.5, float64(i%5))
		}
		top, err := f.scorer.Top(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, top, 10)
		for i, r := range top {
			require.Equal(t, want[r.InfoHash], r.Score)
			if i < 8 {
				require.Equal(t, 1.0, r.Score, "8 torrents at 1.0, then 0.5")
			} else {
				require.Equal(t, 0.5, r.Score)
			}
			if i > 0 && top[i-1].Score == r.Score {
				require.Less(t, top[i-1].InfoHash, r.InfoHash, "ties in info-hash order")
			}
		}
		all, err := f.scorer.Top(t.Context(), 1000)
		require.NoError(t, err)
		require.Len(t, all, 40)
		for i := 1; i < len(all); i++ {
			require.GreaterOrEqual(t, all[i-1].Score, all[i].Score)
		}
		_, err = f.scorer.Top(t.Context(), 0)
		require.ErrorIs(t, err, scoring.ErrInvalid)
	})
}

// TestLinesStartAgainWhenATorrentComesBack: with tracker_grace -1 (a
// failure is no peers at once, as btstat did) an unreachable tracker and
// an empty swarm take the torrent out on the 8th round; registered again,
// it is back at 1.0 with every line starting again, and its history kept.
func TestLinesStartAgainWhenATorrentComesBack(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	url := "udp://" + silent.LocalAddr().String() + "/announce"
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, false, `{"tracker_timeout":"50ms","tracker_grace":-1,"tracker_retries":-1}`)
		hash := f.registered("comes back")
		f.setTrackers(hash, scoring.Tracker{URL: url})
		for round := int64(1); round <= 7; round++ {
			f.round(hash, round)
		}
		require.InDelta(t, math.Pow(0.5, 7), lineOf(f.view(hash), url), 1e-15)
		f.round(hash, 8)
		v := f.view(hash)
		require.Equal(t, "removed", v.State)
		require.False(t, v.Indexed)
		require.True(t, v.History[0].Removed)

		f.clock.Advance(time.Minute)
		require.NoError(t, f.store.Register(t.Context(), hash, swarm.Registration{ID: "2"}))
		ok, err := f.scorer.Track(t.Context(), hash)
		require.NoError(t, err)
		require.True(t, ok)
		v = f.view(hash)
		require.Equal(t, "active", v.State)
		require.Equal(t, 1.0, v.Score)
		require.Equal(t, 1.0, lineOf(v, "swarm"))
		require.Equal(t, -1.0, lineOf(v, url), "the tracker's line starts again at its next round")
		require.Len(t, v.History, 8)
		f.round(hash, 9)
		require.InDelta(t, 0.5, lineOf(f.view(hash), url), 1e-15)
	})
}
