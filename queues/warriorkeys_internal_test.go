package queues

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/lua"
)

// TestClaimKeysInTheScriptsOrder builds claim.lua's KEYS from the cache and
// checks each against its builder in the order the script's header gives,
// groups included, and that filling in one caller's keys leaves the cached
// list as it was for the next.
func TestClaimKeysInTheScriptsOrder(t *testing.T) {
	var cache warriorKeyCache
	now := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	state := &groupState{version: "3", groups: []compiledGroup{{LimitGroup: LimitGroup{Name: "big", RatePerMinute: 60, Burst: 2}}}, removed: []string{"old"}}
	for _, who := range []struct{ downloader, ip string }{{"alice", "10.0.0.1"}, {"bob", "::1"}} {
		keys, args := claimKeys(cache.get("p"), "p", who.downloader, who.ip, "", now, state)
		want := []string{
			ConfigKey("p"), ReservedQueueKey("p", who.downloader),
			QueueKey("p", QueueTodo), QueueKey("p", QueueBackfeed), QueueKey("p", QueueSecondary), QueueKey("p", QueueRedo),
			LegacyOutKey("p"), DeadlinesKey("p"), ClaimsKey("p"), DoneKey("p"), BudgetKey("p"),
			ExtrasKey("p"), StatsKey("p"), BlockedKey("p"), RateKey("p"), ReleasedKey("p"),
			DownloaderRateKey("p", who.downloader), IPRateKey("p", who.ip), HourlyKey("p", now), RecentDoneKey("p"),
			EventsKey("p"), ExpiryCursorKey("p"), QueueKey("p", QueueScored), ReservedSetKey("p"), RedoCancelledKey("p"),
		}
		for _, g := range []string{"big", "old"} {
			for _, q := range SharedQueues {
				want = append(want, GroupQueueKey("p", q, g))
			}
			want = append(want, GroupRateKey("p", g))
		}
		want = append(want, FailedKey("p"), HistoryKey("p"), BatchesKey("p"), BatchDeadlinesKey("p"), QueuedKey("p"))
		require.Equal(t, want, keys, who.downloader)
		require.Equal(t, []any{"", "3", "60", 2, "big", "-1", 1, "old"}, args)
	}
	require.Equal(t, []string{ConfigKey("q"), DeadlinesKey("q"), ClaimsKey("q"), DoneKey("q"), BudgetKey("q"),
		ExtrasKey("q"), StatsKey("q"), ReleasedKey("q"), RecentDoneKey("q"), DoneArchiveKey("q"),
		EventsKey("q"), RedoCancelledKey("q"), HistoryKey("q"), BatchesKey("q"), BatchDeadlinesKey("q")}, cache.get("q").done)
}

// TestWarriorKeyCacheIsBounded: requests name any slug, existing or not,
// so the cache starts over rather than grow past its bound.
func TestWarriorKeyCacheIsBounded(t *testing.T) {
	var cache warriorKeyCache
	for i := 0; i < 3*warriorKeyCacheMax; i++ {
		cache.get(fmt.Sprintf("p%d", i))
		require.LessOrEqual(t, len(cache.entries), warriorKeyCacheMax)
	}
	require.Equal(t, ConfigKey("p5"), cache.get("p5").claim[0])
}

// TestCounterMinuteKeysAreTheBuilders: the names countClaim and countDone
// take from the per-minute cache are the key builders' and the formats'
// for every time, across a minute, a recent-bucket, an hour, a day's and a
// year's turn, with the clock going back, and before 1970; and one minute's
// names are built once.
func TestCounterMinuteKeysAreTheBuilders(t *testing.T) {
	var cache warriorKeyCache
	keys := cache.get("p")
	require.Equal(t, StatsKey("p"), keys.stats)
	require.Equal(t, []string{DownloaderBytesKey("p"), DownloaderItemsKey("p"), DownloaderVersionKey("p"), DomainBytesKey("p")},
		[]string{keys.downloaderBytes, keys.downloaderItems, keys.downloaderVersion, keys.domainBytes})
	var times []time.Time
	for _, base := range []time.Time{
		time.Date(2026, 12, 31, 23, 58, 0, 0, time.UTC), // day, hour, year and bucket turns
		time.Date(2026, 11, 29, 12, 4, 0, 0, time.UTC),  // a recent bucket's turn (5 min)
		time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC), // before the epoch
	} {
		for _, d := range []time.Duration{0, 59*time.Second + 999*time.Millisecond, time.Minute, 90 * time.Second, 2 * time.Minute, time.Second} {
			times = append(times, base.Add(d))
		}
	}
	times = append(times, time.Date(2026, 11, 29, 12, 4, 30, 0, time.FixedZone("x", 5*3600+1800)))
	for _, now := range times {
		m := keys.minuteKeys("p", now)
		utc := now.UTC()
		require.Equal(t, HourlyKey("p", now), m.hourly, now)
		require.Equal(t, SeriesMinuteKey("p", now), m.seriesMinute, now)
		require.Equal(t, SeriesHourKey("p", now), m.seriesHour, now)
		require.Equal(t, SeriesDownloaderKey("p", now), m.seriesDownloader, now)
		require.Equal(t, RecentDownloadersKey("p", now), m.recent, now)
		require.Equal(t, []string{utc.Format("1504"), utc.Format("1504") + "b", utc.Format("010215"), utc.Format("010215") + "b", utc.Format("010215")[4:6] + " "},
			[]string{m.minuteField, m.minuteBytes, m.hourField, m.hourBytes, m.hourOfDay}, now)
	}
	first := keys.minuteKeys("p", time.Date(2026, 11, 29, 12, 4, 1, 0, time.UTC))
	require.Same(t, first, keys.minuteKeys("p", time.Date(2026, 11, 29, 12, 4, 59, 0, time.UTC)))
	require.NotSame(t, first, keys.minuteKeys("p", time.Date(2026, 11, 29, 12, 5, 0, 0, time.UTC)))
}

// The frontend gives the plain scripts the claim batch keys from
// claimBatchMin items on; claim.lua batches from the prelude's batch_min:
// the two must agree.
func TestClaimBatchMinIsThePreludes(t *testing.T) {
	prelude, err := lua.Files.ReadFile("prelude.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^local batch_min = (\d+)$`).FindSubmatch(prelude)
	require.NotNil(t, m, "prelude.lua defines batch_min")
	require.Equal(t, strconv.Itoa(claimBatchMin), string(m[1]))
	all := claimPlainKeys("p")
	require.Len(t, plainKeys(all, claimBatchMin-1), len(all)-2)
	require.Equal(t, all, plainKeys(all, claimBatchMin))
}
