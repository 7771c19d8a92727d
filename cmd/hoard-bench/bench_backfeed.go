package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/queues"
)

// benchBackfeed measures backfeed ingest over HTTP: concurrent grab
// scripts POST NUL-joined batches of 1,000 distinct items (with the
// trailing NUL), deduplicated by the project's Bloom filter. It also
// reports the Redis bytes each queued item costs in todo:backfeed.
func benchBackfeed(ctx context.Context, env *benchEnv, o benchOptions) error {
	const senders, batchSize = 8, 1000
	fmt.Printf("\nbackfeed ingest: %d senders POST batches of %d distinct items over HTTP, Bloom filter at 1e-6; %d runs of %s\n",
		senders, batchSize, o.runs, o.duration)
	var figures []runFigure
	var perItem []float64
	for run := 0; run < o.runs; run++ {
		if err := env.rdb.FlushAll(ctx).Err(); err != nil {
			return err
		}
		slug := fmt.Sprintf("backfeed-%d", run)
		secret := "benchsecret_" + env.token[:8]
		if _, err := env.engine.CreateProject(ctx, slug, queues.SettingsPatch{BackfeedSecret: &secret}); err != nil {
			return err
		}
		url := env.url + "/backfeed/legacy/" + slug + "-" + secret
		runCtx, cancel := context.WithTimeout(ctx, o.duration)
		var items atomic.Int64
		var firstErr error
		var once sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for s := 0; s < senders; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var body bytes.Buffer
				for n := 0; runCtx.Err() == nil; n++ {
					body.Reset()
					for i := 0; i < batchSize; i++ {
						fmt.Fprintf(&body, "url:https://example.org/s%d/b%d/i%d\x00", s, n, i)
					}
					req, _ := http.NewRequestWithContext(runCtx, http.MethodPost, url, bytes.NewReader(body.Bytes()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						if runCtx.Err() == nil {
							once.Do(func() { firstErr = err })
						}
						return
					}
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var got struct {
						StatusCode int `json:"status_code"`
						New        int `json:"new"`
					}
					if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &got) != nil || got.StatusCode != 200 {
						once.Do(func() { firstErr = fmt.Errorf("backfeed: HTTP %d: %s", resp.StatusCode, raw) })
						return
					}
					items.Add(int64(got.New))
				}
			}()
		}
		wg.Wait()
		cancel()
		if firstErr != nil {
			return firstErr
		}
		rate := float64(items.Load()) / time.Since(start).Seconds()
		figures = append(figures, runFigure{roundTrips: rate, items: rate})
		usage, err := env.rdb.MemoryUsage(ctx, queues.QueueKey(slug, queues.QueueBackfeed), 0).Result()
		if err != nil {
			return err
		}
		length, err := env.rdb.LLen(ctx, queues.QueueKey(slug, queues.QueueBackfeed)).Result()
		if err != nil {
			return err
		}
		perItem = append(perItem, float64(usage)/float64(max(length, 1)))
	}
	med := medianFigure(figures)
	fmt.Printf("  ingest %9.0f new items/s   (runs: %s)\n", med.items, describeRuns(figures))
	fmt.Printf("  todo:backfeed costs %.1f bytes of Redis per queued item (~36-char URLs; MEMORY USAGE / LLEN, last run), plus the filter's bits (%s)\n",
		perItem[len(perItem)-1], filterBytesPerItem(queues.DefaultBloomCapacity, queues.DefaultBloomFPRate))
	return nil
}

// filterBytesPerItem is what a generation the defaults start now costs per
// item of its capacity, from the shape the frontend would record.
func filterBytesPerItem(capacity int, fp float64) string {
	shape, err := queues.BloomShape(capacity, fp, 0)
	if err != nil {
		return err.Error()
	}
	var m, k, capacityRecorded uint64
	if _, err := fmt.Sscanf(shape, "%d:%d:%d", &m, &k, &capacityRecorded); err != nil || capacityRecorded == 0 {
		return "shape " + shape
	}
	return fmt.Sprintf("%.1f bytes per item of capacity at %g, shape %s", float64(m)/8/float64(capacityRecorded), fp, shape)
}
