package queues

import (
	"sync"
	"sync/atomic"
	"time"
)

// warriorKeyCache keeps, per project, the key names of claim.lua and
// done.lua that depend only on the project. A warrior round trip built
// some forty key names by concatenation (4% of hoard serve's CPU in a
// warrior-path profile); now it copies one slice and builds four. The
// lists are read-only once stored: callers copy before filling in.
//
// Slugs come from requests, and a request for a project that does not
// exist still gets here (the script says so), so the cache is bounded:
// when it holds warriorKeyCacheMax projects it starts over.
type warriorKeyCache struct {
	mu      sync.Mutex
	entries map[string]*warriorKeys
}

const warriorKeyCacheMax = 1024

type warriorKeys struct {
	claim     []string // claimProjectKeys
	claimTail []string // claimTailKeys
	done      []string // doneKeys
	plain     []string // claimPlainKeys
	donePlain []string // donePlainKeys

	// The hashes countClaim and countDone add to that depend only on
	// the project.
	stats, downloaderBytes, downloaderItems, downloaderVersion, domainBytes string
	// minute is the keys and fields of the latest minute counted in
	// (counterMinute): a done formatted seven dates and built a dozen
	// strings, the same all minute long.
	minute atomic.Pointer[counterMinute]
}

// counterMinute is what countClaim and countDone name by the time, for
// one UTC minute: every name here is the same for any time inside it
// (RecentBucket is whole minutes).
type counterMinute struct {
	unixMinute                                                 int64
	hourly, seriesMinute, seriesHour, seriesDownloader, recent string
	// The series' fields: the minute ("1504") and its bytes ("1504b"), the
	// hour ("010215") and its bytes, and the hour of the day ("15 ").
	minuteField, minuteBytes, hourField, hourBytes, hourOfDay string
}

// minuteKeys returns the names for now's UTC minute, built at most once a
// minute per project (two frontends' goroutines may both build one at a
// minute's turn; either is right).
func (k *warriorKeys) minuteKeys(slug string, now time.Time) *counterMinute {
	um := unixMinute(now)
	if m := k.minute.Load(); m != nil && m.unixMinute == um {
		return m
	}
	utc := now.UTC()
	minute, hour := utc.Format("1504"), utc.Format("010215")
	m := &counterMinute{unixMinute: um,
		hourly: HourlyKey(slug, now), seriesMinute: SeriesMinuteKey(slug, now), seriesHour: SeriesHourKey(slug, now),
		seriesDownloader: SeriesDownloaderKey(slug, now), recent: RecentDownloadersKey(slug, now),
		minuteField: minute, minuteBytes: minute + "b", hourField: hour, hourBytes: hour + "b", hourOfDay: hour[4:6] + " "}
	k.minute.Store(m)
	return m
}

// unixMinute is now's minute since 1970 (floored, before 1970 too).
func unixMinute(now time.Time) int64 {
	m := now.Unix() / 60
	if now.Unix() < 0 && now.Unix()%60 != 0 {
		m--
	}
	return m
}

func (c *warriorKeyCache) get(slug string) *warriorKeys {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.entries[slug]; ok {
		return k
	}
	if c.entries == nil || len(c.entries) >= warriorKeyCacheMax {
		c.entries = make(map[string]*warriorKeys)
	}
	k := &warriorKeys{claim: claimProjectKeys(slug), claimTail: claimTailKeys(slug), done: doneKeys(slug),
		plain: claimPlainKeys(slug), donePlain: donePlainKeys(slug),
		stats: StatsKey(slug), downloaderBytes: DownloaderBytesKey(slug), downloaderItems: DownloaderItemsKey(slug),
		downloaderVersion: DownloaderVersionKey(slug), domainBytes: DomainBytesKey(slug)}
	c.entries[slug] = k
	return k
}
