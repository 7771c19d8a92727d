package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
)

// commandStat is one command's line of INFO commandstats: its calls and
// the microseconds Redis spent in them. A command a script calls counts
// on its own line, and its time is inside fcall's (evalsha's on a server
// without functions) too.
type commandStat struct{ calls, usec int64 }

// commandStats is INFO commandstats by command name ("fcall", "hset").
type commandStats map[string]commandStat

// scripts sums the script calls' lines: FCALL, and EVALSHA and EVAL where
// a server has no functions (luascript.IsScriptCall), so a figure of
// "time inside scripts" reads the same on either.
func (c commandStats) scripts() commandStat {
	var sum commandStat
	for name, s := range c {
		if luascript.IsScriptCall(name) {
			sum.calls += s.calls
			sum.usec += s.usec
		}
	}
	return sum
}

// redisCommandStats reads INFO commandstats.
func redisCommandStats(ctx context.Context, rdb *redis.Client) (commandStats, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	out := commandStats{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCommand := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCommand {
			continue
		}
		var s commandStat
		for _, field := range strings.Split(fields, ",") {
			key, value, _ := strings.Cut(field, "=")
			var target *int64
			switch key {
			case "calls":
				target = &s.calls
			case "usec":
				target = &s.usec
			default:
				continue
			}
			if *target, err = strconv.ParseInt(value, 10, 64); err != nil {
				return nil, fmt.Errorf("redis INFO commandstats %s %s: %w", name, key, err)
			}
		}
		out[name] = s
	}
	return out, nil
}

// add adds after - before to c: what ran between two readings.
func (c commandStats) add(before, after commandStats) {
	for name, a := range after {
		b := before[name]
		sum := c[name]
		sum.calls += a.calls - b.calls
		sum.usec += a.usec - b.usec
		c[name] = sum
	}
}

// commandDifference is one command's calls and µs per announce in two
// configurations.
type commandDifference struct {
	name             string
	callsA, callsB   float64
	microsA, microsB float64
}

// compareCommands lists the commands whose µs per announce differ most
// between a (over announcesA) and b, at most n, leaving out the bench's
// own INFO and CONFIG.
func compareCommands(a commandStats, announcesA int64, b commandStats, announcesB int64, n int) []commandDifference {
	var out []commandDifference
	for _, name := range unionKeys(a, b) {
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		out = append(out, commandDifference{name: name,
			callsA: float64(a[name].calls) / float64(max(announcesA, 1)), callsB: float64(b[name].calls) / float64(max(announcesB, 1)),
			microsA: float64(a[name].usec) / float64(max(announcesA, 1)), microsB: float64(b[name].usec) / float64(max(announcesB, 1))})
	}
	abs := func(x float64) float64 { return max(x, -x) }
	slices.SortFunc(out, func(x, y commandDifference) int {
		dx, dy := abs(x.microsA-x.microsB), abs(y.microsA-y.microsB)
		switch {
		case dx > dy:
			return -1
		case dx < dy:
			return 1
		}
		return strings.Compare(x.name, y.name)
	})
	return out[:min(n, len(out))]
}

func unionKeys(a, b commandStats) []string {
	var names []string
	for name := range a {
		names = append(names, name)
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			names = append(names, name)
		}
	}
	return names
}
