package localredis

import (
	"strconv"
	"time"
)

// Keeping the AOF short enough to replay in seconds.
//
// A SIGKILL of redis-server (or an OOM kill, or a reboot) costs a replay
// of its AOF before anything is served again. Redis 7's AOF is a base,
// written by the last rewrite, plus an incremental file of every write
// since. With aof-use-rdb-preamble the base is an RDB snapshot, which
// loads many times faster than commands; the incremental part replays at
// about assumedReplayRate (26-51 MB/s was measured for hoard's own
// scripts' effects, issue 21). Redis's own trigger rewrites by size and
// growth alone, so a large dataset lets the incremental part grow to the
// dataset's size before a rewrite: a 400 MB base allows 400 MB of
// increment, 16 s of replay. watchAOF triggers a rewrite (BGREWRITEAOF)
// instead once the incremental part would take longer than the replay
// target to replay, judged at the slower of assumedReplayRate and the
// slowest replay this Server has seen.
const (
	// DefaultAOFReplayTarget bounds the incremental part's replay.
	DefaultAOFReplayTarget = 5 * time.Second
	// assumedReplayRate is the replay rate (bytes/s) assumed until a
	// slower one is measured: the low end of what issue 21 measured.
	assumedReplayRate = 25e6
	// aofCheckPeriod is how often watchAOF reads INFO persistence.
	aofCheckPeriod = 5 * time.Second
	// minRewriteInterval keeps a failing rewrite from being asked for
	// again on every check (Redis logs why it failed).
	minRewriteInterval = 30 * time.Second
	// minRewriteThreshold keeps a tiny target from rewriting all the time:
	// each rewrite writes the whole dataset out again.
	minRewriteThreshold = 16 << 20
)

// replayTarget is the configured target, or 0 when hoard's trigger is off.
func (s *Server) replayTarget() time.Duration {
	switch {
	case s.cfg.AOFReplayTarget < 0:
		return 0
	case s.cfg.AOFReplayTarget == 0:
		return DefaultAOFReplayTarget
	default:
		return s.cfg.AOFReplayTarget
	}
}

// rate is the replay rate watchAOF plans with, in bytes per second.
func (s *Server) rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayRate > 0 && s.replayRate < assumedReplayRate {
		return s.replayRate
	}
	return assumedReplayRate
}

// aofRewriteThreshold is the incremental part's size (bytes) that takes
// the replay target to replay; also Redis's own auto-aof-rewrite-min-size.
func (s *Server) aofRewriteThreshold() int64 {
	target := s.replayTarget()
	if target == 0 {
		target = DefaultAOFReplayTarget
	}
	return max(int64(s.rate()*target.Seconds()), minRewriteThreshold)
}

// noteReplay records a replay seen at start-up: bytes loaded in took. A
// replay shorter than a second says little (process start-up dominates),
// and an adopted redis-server's took is not its replay's.
func (s *Server) noteReplay(bytes int64, took time.Duration, adopted bool) float64 {
	rate := float64(bytes) / took.Seconds()
	if adopted || took < time.Second {
		return rate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.replayRate == 0 || rate < s.replayRate {
		s.replayRate = rate
	}
	return rate
}

// watchAOF asks for a rewrite whenever the AOF's incremental part would
// take longer than the replay target to replay, until Stop.
func (s *Server) watchAOF(sup *supervision) {
	target := s.replayTarget()
	if target == 0 {
		return
	}
	ticker := time.NewTicker(aofCheckPeriod)
	defer ticker.Stop()
	var lastAsked time.Time
	for {
		select {
		case <-sup.ctx.Done():
			return
		case <-ticker.C:
		}
		fields, err := s.info(sup.ctx, "persistence")
		if err != nil || fields["aof_enabled"] != "1" || fields["loading"] == "1" ||
			fields["aof_rewrite_in_progress"] == "1" || fields["aof_rewrite_scheduled"] == "1" {
			continue
		}
		current, err1 := strconv.ParseInt(fields["aof_current_size"], 10, 64)
		base, err2 := strconv.ParseInt(fields["aof_base_size"], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		increment := current - base
		threshold := s.aofRewriteThreshold()
		if increment <= threshold || time.Since(lastAsked) < minRewriteInterval {
			continue
		}
		lastAsked = time.Now()
		rate := s.rate()
		s.logger.Info("rewriting the AOF: its incremental part would take longer than the replay target to replay",
			"increment_bytes", increment, "base_bytes", base,
			"replay_estimate", (time.Duration(float64(increment) / rate * float64(time.Second))).Round(100*time.Millisecond),
			"replay_target", target, "replay_mb_per_second", strconv.FormatFloat(rate/1e6, 'f', 1, 64))
		client := s.newClient()
		if err := client.BgRewriteAOF(sup.ctx).Err(); err != nil {
			s.logger.Warn("BGREWRITEAOF failed", "error", err)
		}
		client.Close()
	}
}
