package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/queues"
)

// Item events reach plugins two ways:
//
//   - done: done.lua publishes every completion on queues.EventsChannel as
//     {"project": slug, "entry": {"items": [...], "by": downloader, "at": ms, ...}}.
//     The host subscribes once and routes each item to the plugins owning
//     it. Pub/sub is a hint: a message published while this host is not
//     subscribed is lost.
//   - reclaim: no script announces an expired claim (the queue engine
//     reclaims lazily, inside claim.lua), so the host sweeps the
//     deadlines ZSET of each project a plugin owns, from a cursor kept in
//     Redis, under a lease so one frontend sweeps at a time. That sweep
//     reads stored deadlines, so expirations that happen while the plugin
//     is down are delivered once it is back.

// doneMessage is what done.lua publishes.
type doneMessage struct {
	Project string `json:"project"`
	Entry   struct {
		Items []string `json:"items"`
		By    string   `json:"by"`
		At    int64    `json:"at"`
	} `json:"entry"`
}

// subscribe subscribes to completions and waits for Redis to confirm, so no
// completion after Start returns is missed for want of a subscription.
func (h *Host) subscribe(ctx context.Context) (*redis.PubSub, error) {
	ps := h.opts.Redis.Subscribe(ctx, queues.EventsChannel)
	if _, err := ps.Receive(ctx); err != nil {
		_ = ps.Close()
		return nil, fmt.Errorf("subscribe to %s: %w", queues.EventsChannel, err)
	}
	return ps, nil
}

// listenDone routes completions to their plugins until ctx ends or ps is
// closed. go-redis resubscribes after a reconnect by itself.
func (h *Host) listenDone(ctx context.Context, ps *redis.PubSub) {
	ch := ps.Channel(redis.WithChannelSize(1000))
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			h.routeDoneMessage(msg.Payload)
		}
	}
}

func (h *Host) routeDoneMessage(payload string) {
	var msg doneMessage
	if err := json.Unmarshal([]byte(payload), &msg); err != nil {
		h.log.Debug("ignoring a malformed completion event", "err", err)
		return
	}
	if !h.anyOwnsProject(msg.Project) {
		return
	}
	at := time.UnixMilli(msg.Entry.At)
	for _, item := range msg.Entry.Items {
		h.DeliverDone(ItemEvent{Project: msg.Project, Item: item, Downloader: msg.Entry.By, At: at})
	}
}

func (h *Host) anyOwnsProject(project string) bool {
	for _, s := range h.supervisors {
		if s.description().ownsProject(project) {
			return true
		}
	}
	return false
}

// sweepReclaims delivers expired claims of the plugin's projects every
// ReclaimSweepInterval while the plugin runs.
func (s *supervisor) sweepReclaims(ctx context.Context) {
	opts := &s.h.opts
	for {
		if !s.sleep(ctx, opts.ReclaimSweepInterval) {
			return
		}
		inst, desc, _ := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		projects := desc.projects()
		if len(projects) == 0 {
			continue
		}
		if !s.h.lease(ctx, reclaimLeaseKey(s.spec.Name), opts.ReclaimSweepInterval-opts.ReclaimSweepInterval/10) {
			continue
		}
		for _, project := range projects {
			if err := s.sweepProject(ctx, project); err != nil && ctx.Err() == nil {
				s.log.Warn("reclaim sweep failed", "project", project, "err", err)
			}
		}
	}
}

// sweepProject delivers the claims of project whose reclaim deadline passed
// since the cursor, at most as many as the backlog has room for, and
// advances the cursor past them. The first sweep of a project starts at
// now: claims that expired before the plugin ever ran are not replayed.
func (s *supervisor) sweepProject(ctx context.Context, project string) error {
	rdb := s.h.opts.Redis
	now := s.h.opts.Clock.Now().UnixMilli()
	ctx, cancel := context.WithTimeout(ctx, s.h.opts.CallTimeout)
	defer cancel()
	cursorKey := reclaimCursorKey(s.spec.Name)
	raw, err := rdb.HGet(ctx, cursorKey, project).Result()
	if errors.Is(err, redis.Nil) {
		return rdb.HSet(ctx, cursorKey, project, now).Err()
	}
	if err != nil {
		return err
	}
	cursor, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || cursor > now {
		return rdb.HSet(ctx, cursorKey, project, now).Err()
	}
	room := min(s.h.opts.ReclaimSweepBatch, cap(s.events)-len(s.events))
	if room <= 0 {
		return nil
	}
	expired, err := rdb.ZRangeByScoreWithScores(ctx, queues.DeadlinesKey(project), &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(cursor, 10), Max: strconv.FormatInt(now, 10), Count: int64(room),
	}).Result()
	if err != nil {
		return err
	}
	next := now
	if len(expired) == room {
		// A full page: continue after it next time. Items sharing the last
		// page's deadline are delivered again rather than skipped, unless
		// the whole page shares it.
		last := int64(expired[len(expired)-1].Score)
		next = last - 1
		if int64(expired[0].Score) == last {
			next = last
		}
	}
	if len(expired) > 0 {
		names := make([]string, len(expired))
		for i, z := range expired {
			names[i], _ = z.Member.(string)
		}
		claims, err := rdb.HMGet(ctx, queues.ClaimsKey(project), names...).Result()
		if err != nil {
			return err
		}
		for i, z := range expired {
			ev := ItemEvent{Project: project, Item: names[i], At: time.UnixMilli(int64(z.Score))}
			if record, ok := claims[i].(string); ok {
				ev.Downloader = claimant(record)
			}
			s.offerReclaim(ev)
		}
	}
	return rdb.HSet(ctx, cursorKey, project, next).Err()
}

// offerReclaim queues a reclaim for this plugin only: the sweep is per
// plugin, so other plugins sweep their own projects.
func (s *supervisor) offerReclaim(ev ItemEvent) {
	s.offer(hookReclaim, ev)
}

// claimant reads the downloader from a claim record
// "<times claimed> <claimed at ms> <downloader> <ip>".
func claimant(record string) string {
	fields := strings.Fields(record)
	if len(fields) < 3 {
		return ""
	}
	return fields[2]
}
