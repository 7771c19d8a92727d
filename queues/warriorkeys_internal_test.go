package queues

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
		want = append(want, FailedKey("p"), HistoryKey("p"), QueuedKey("p"))
		require.Equal(t, want, keys, who.downloader)
		require.Equal(t, []any{"", "3", "60", 2, "big", "-1", 1, "old"}, args)
	}
	require.Equal(t, []string{ConfigKey("q"), DeadlinesKey("q"), ClaimsKey("q"), DoneKey("q"), BudgetKey("q"),
		ExtrasKey("q"), StatsKey("q"), ReleasedKey("q"), RecentDoneKey("q"), DoneArchiveKey("q"),
		EventsKey("q"), RedoCancelledKey("q"), HistoryKey("q")}, cache.get("q").done)
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
