package redistest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// CountRedisInstructions brackets a benchmark's part for callgrind: with
// HOARD_BENCH_CALLGRIND_PID naming a redis-server started under `valgrind
// --tool=callgrind --instr-atstart=no` (and HOARD_TEST_REDIS_URL pointing
// at it), it turns instrumentation on and zeroes the counters now, and the
// returned func dumps them (one callgrind.out file per part) and returns
// the part's wall time, by which Redis's idle timers can be subtracted.
// Instruction counts do not move with the machine's load, as CPU time
// does. Without the variable it does nothing and returns 0.
func CountRedisInstructions(tb testing.TB) func() time.Duration {
	pid := os.Getenv("HOARD_BENCH_CALLGRIND_PID")
	if pid == "" {
		return func() time.Duration { return 0 }
	}
	control := func(args ...string) {
		if out, err := exec.Command("callgrind_control", append(args, pid)...).CombinedOutput(); err != nil {
			tb.Fatalf("callgrind_control %v: %v: %s", args, err, out)
		}
	}
	control("-i", "on")
	control("-z")
	start := time.Now()
	return func() time.Duration {
		control("-d")
		control("-i", "off")
		return time.Since(start)
	}
}
