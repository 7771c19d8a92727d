package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/hoardproject/hoard/plugins"
)

// Item events reach plugins through each project's event log (see
// queues/events.go): a capped Redis stream in the project's slot, written
// by the same script that completes items (done.lua) or notices an expired
// claim (claim.lua when it hands the item out again, or the expiry scan
// every frontend runs every ReclaimSweepInterval; a shared cursor makes
// each expiry logged once). Each plugin reads every project it owns
// through its own consumer group, so:
//
//   - each event is handled by one frontend, however many run;
//   - an event is acknowledged only after the plugin's hook returned nil;
//     one whose hook failed, or whose frontend or plugin died while
//     handling it, stays pending, and after EventRetryAfter any frontend
//     takes it over and delivers it again, up to EventMaxDeliveries times,
//     after which it is given up (logged and counted);
//   - events logged while a plugin (or every frontend) was down are
//     delivered when it is back, as far as the capped log reaches.
//
// Hooks must therefore be idempotent: an event can arrive more than once
// (a frontend that died after the hook but before the acknowledgement),
// and a retried done entry repeats all of its items.

// LoggedEvent is one entry of a project's event log.
type LoggedEvent struct {
	ID string
	// Reclaim is true for an expired claim, false for a completion.
	Reclaim bool
	Items   []string
	// By completed the items or held the expired claim.
	By string
	// At is when the items completed or the claim's deadline passed.
	At time.Time
	// Result is the worker's JSON result of a done, or nil.
	Result json.RawMessage
	// Deliveries counts the times the entry was handed out, this one
	// included.
	Deliveries int64
}

// StaleLoggedEvents is what a takeover of stale entries found.
type StaleLoggedEvents struct {
	// Events are now this consumer's to handle again.
	Events []LoggedEvent
	// GivenUp reached the delivery limit and were acknowledged unhandled.
	GivenUp []LoggedEvent
	// Trimmed were pending but already trimmed from the log.
	Trimmed int
}

// EventLog is the queue engine's durable per-project event log, as the
// host reads it; cmd/hoard adapts *queues.Engine (EngineEventLog).
type EventLog interface {
	// EnableEventLog turns the project's event log on if it is off.
	EnableEventLog(ctx context.Context, project string) error
	// JoinEventLog creates the consumer group unless it exists.
	JoinEventLog(ctx context.Context, project, group string) error
	// ReadEvents waits up to block for entries new to the group.
	ReadEvents(ctx context.Context, project, group, consumer string, count int, block time.Duration) ([]LoggedEvent, error)
	// AckEvents acknowledges handled entries.
	AckEvents(ctx context.Context, project, group string, ids ...string) error
	// ClaimStaleEvents takes over entries pending for longer than idle.
	ClaimStaleEvents(ctx context.Context, project, group, consumer string, idle time.Duration, count, maxDeliveries int) (StaleLoggedEvents, error)
	// ScanExpiredClaims logs up to limit newly expired claims.
	ScanExpiredClaims(ctx context.Context, project string, limit int) (logged int, more bool, err error)
}

// eventGroup is a plugin's consumer group on its projects' event logs.
func eventGroup(plugin string) string { return "plugin:" + plugin }

// followEventLogs starts one reader per project the plugin owns, as its
// descriptions name them (a restarted plugin may own new ones).
func (s *supervisor) followEventLogs(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	following := map[string]bool{}
	for {
		inst, desc, changed := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		for _, project := range desc.Projects() {
			if following[project] {
				continue
			}
			following[project] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.followProject(ctx, project)
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// followProject reads one project's event log for the plugin until ctx
// ends: new entries as they come, stale ones every EventRetryAfter, and an
// expiry scan every ReclaimSweepInterval.
func (s *supervisor) followProject(ctx context.Context, project string) {
	opts := &s.h.opts
	events := opts.Events
	group := eventGroup(s.spec.Name)
	joined := false
	var lastStale, lastScan time.Time
	for ctx.Err() == nil {
		inst, _, _ := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		if !joined {
			err := s.joinEventLog(ctx, project, group)
			if err != nil {
				s.logEventError("cannot join the project's event log", project, err)
				s.sleep(ctx, opts.EventRetryAfter)
				continue
			}
			joined = true
		}
		now := opts.Clock.Now()
		if now.Sub(lastScan) >= opts.ReclaimSweepInterval {
			lastScan = now
			s.scanExpired(ctx, project)
		}
		if now.Sub(lastStale) >= opts.EventRetryAfter {
			lastStale = now
			s.retryStale(ctx, project, group)
		}
		evs, err := events.ReadEvents(ctx, project, group, s.h.owner, opts.EventBatch, opts.EventBlock)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The log or its group may be gone (a key deleted by hand):
			// join again before the next read.
			joined = false
			s.logEventError("reading the project's event log failed", project, err)
			s.sleep(ctx, opts.EventBlock)
			continue
		}
		s.handleLogged(ctx, project, group, evs)
	}
}

func (s *supervisor) joinEventLog(ctx context.Context, project, group string) error {
	ctx, cancel := context.WithTimeout(ctx, s.h.opts.CallTimeout)
	defer cancel()
	if err := s.h.opts.Events.EnableEventLog(ctx, project); err != nil {
		return err
	}
	return s.h.opts.Events.JoinEventLog(ctx, project, group)
}

// scanExpired logs the project's newly expired claims, a bounded number of
// pages per call. Every frontend scans: the scan is one script with a
// stored cursor, so concurrent scans never log an expiry twice.
func (s *supervisor) scanExpired(ctx context.Context, project string) {
	ctx, cancel := context.WithTimeout(ctx, s.h.opts.CallTimeout)
	defer cancel()
	for range 10 {
		_, more, err := s.h.opts.Events.ScanExpiredClaims(ctx, project, s.h.opts.ReclaimSweepBatch)
		if err != nil {
			if ctx.Err() == nil {
				s.logEventError("expiry scan failed", project, err)
			}
			return
		}
		if !more {
			return
		}
	}
}

// retryStale takes over the group's entries pending for longer than
// EventRetryAfter (a frontend died holding them, or their hook failed) and
// handles them again.
func (s *supervisor) retryStale(ctx context.Context, project, group string) {
	opts := &s.h.opts
	for range 10 {
		callCtx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
		stale, err := opts.Events.ClaimStaleEvents(callCtx, project, group, s.h.owner, opts.EventRetryAfter, opts.EventBatch, opts.EventMaxDeliveries)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.logEventError("taking over stale events failed", project, err)
			}
			return
		}
		for _, ev := range stale.GivenUp {
			s.eventsGivenUp.Add(1)
			s.log.Error("plugin event given up after repeated failures; the plugin's next tick must repair what it missed",
				"project", project, "reclaim", ev.Reclaim, "items", len(ev.Items), "first", firstItem(ev.Items),
				"deliveries", ev.Deliveries)
		}
		if stale.Trimmed > 0 {
			s.eventsTrimmed.Add(uint64(stale.Trimmed))
			s.log.Warn("pending plugin events were trimmed from the capped log before they were handled",
				"project", project, "events", stale.Trimmed)
		}
		if len(stale.Events) == 0 {
			return
		}
		s.eventsRetried.Add(uint64(len(stale.Events)))
		s.handleLogged(ctx, project, group, stale.Events)
	}
}

// handleLogged calls the plugin's hook for each item it owns in each entry,
// in order, and acknowledges each entry whose hooks all returned nil.
func (s *supervisor) handleLogged(ctx context.Context, project, group string, evs []LoggedEvent) {
	opts := &s.h.opts
	var acks []string
	for _, logged := range evs {
		inst, desc, _ := s.waitRunning(ctx)
		if inst == nil {
			return
		}
		hook := hookDone
		if logged.Reclaim {
			hook = hookReclaim
		}
		ok := true
		for _, item := range logged.Items {
			t, owned := desc.Owner(project, item)
			if !owned {
				continue
			}
			ev := plugins.ItemEvent{ItemType: t.Name, Project: project, Item: item, Downloader: logged.By, At: logged.At, Result: logged.Result}
			call := func(inst *instance) error {
				return inst.call(ctx, opts.HookTimeout, func(ctx context.Context, p plugins.Plugin) error {
					if hook == hookDone {
						return p.OnItemDone(ctx, ev)
					}
					return p.OnReclaim(ctx, ev)
				})
			}
			err := call(inst)
			// The plugin died under the call (killed, crashed): hand the
			// event to its next instance now rather than after
			// EventRetryAfter. Bounded, so an event that kills every
			// instance is left to the retry limit.
			for restarts := 0; err != nil && restarts < 3 && ctx.Err() == nil && s.diedUnder(ctx, inst, err); restarts++ {
				s.waitReplaced(ctx, inst)
				if inst, desc, _ = s.waitRunning(ctx); inst == nil {
					return
				}
				err = call(inst)
			}
			if err != nil {
				s.hookErrors[hook].Add(1)
				s.logHookError(delivery{hook: hook, ev: ev}, err)
				ok = false
				break
			}
			s.eventsHandled[hook].Add(1)
		}
		if ok {
			acks = append(acks, logged.ID)
		}
	}
	if len(acks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	if err := opts.Events.AckEvents(ctx, project, group, acks...); err != nil && ctx.Err() == nil {
		// Unacknowledged entries are delivered again after EventRetryAfter.
		s.logEventError("acknowledging plugin events failed; they will be delivered again", project, err)
	}
}

// diedUnder reports whether inst died under a call that failed with err.
// A killed plugin's connection breaks (ErrUnavailable) a moment before
// go-plugin reaps the process and the supervisor notices, every
// ExitPollInterval; answering from that moment's state sent the event to
// wait EventRetryAfter (30 s) instead of to the next instance. So for that
// error it waits, at most HookTimeout, for the supervisor to notice.
func (s *supervisor) diedUnder(ctx context.Context, inst *instance, err error) bool {
	gone := func() bool { return inst.exited() || s.running() != inst }
	if gone() || !errors.Is(err, plugins.ErrUnavailable) {
		return gone()
	}
	ctx, cancel := context.WithTimeout(ctx, s.h.opts.HookTimeout)
	defer cancel()
	s.waitReplaced(ctx, inst)
	return gone()
}

// waitReplaced waits until inst is no longer the running instance (the
// supervisor noticed its death), or ctx ends.
func (s *supervisor) waitReplaced(ctx context.Context, inst *instance) {
	for {
		s.mu.Lock()
		current, changed := s.inst, s.changed
		running := s.state == StateRunning
		s.mu.Unlock()
		if !running || current != inst {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// logEventError logs at most one event-log failure per interval, like hook
// errors.
func (s *supervisor) logEventError(msg, project string, err error) {
	if !s.logDue(&s.lastEventLog) {
		return
	}
	s.log.Warn(msg, "project", project, "err", err)
}

func firstItem(items []string) string {
	if len(items) == 0 {
		return ""
	}
	return items[0]
}
