package localredis

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultMaxMemory is the supervised redis-server's default maxmemory: half
// of the memory the machine (or the container's cgroup) has. Redis needs
// room beyond its dataset for an AOF rewrite's fork (copy-on-write pages)
// and hoard for itself and its plugins; a limit refuses writes (no
// eviction) well before the kernel's OOM killer takes Redis, and with it
// the writes of the last second.
const DefaultMaxMemory = "50%"

// ParseMaxMemory reads a maxmemory setting: "0" (no limit), a byte count
// with an optional unit (kb, mb, gb, tb: powers of 1024, any case), or a
// percentage of total, the machine's memory ("50%"). Anything else is an
// error naming the forms.
func ParseMaxMemory(s string, total int64) (int64, error) {
	raw := strings.TrimSpace(s)
	if percent, ok := strings.CutSuffix(raw, "%"); ok {
		p, err := strconv.ParseFloat(percent, 64)
		if err != nil || p <= 0 || p > 100 {
			return 0, fmt.Errorf("redis maxmemory %q: a percentage must be above 0 and at most 100", s)
		}
		if total <= 0 {
			return 0, fmt.Errorf("redis maxmemory %q: the machine's memory is unknown here; give a size such as 4gb", s)
		}
		return int64(float64(total) * p / 100), nil
	}
	number, multiplier := strings.ToLower(raw), int64(1)
	for _, unit := range []struct {
		suffix string
		bytes  int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40}, {"b", 1}} {
		if rest, ok := strings.CutSuffix(number, unit.suffix); ok {
			number, multiplier = rest, unit.bytes
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(number), 10, 64)
	if err != nil || n < 0 || (n > 0 && n > (1<<62)/multiplier) {
		return 0, fmt.Errorf("redis maxmemory %q is not 0 (no limit), a size such as 4gb or 512mb, or a share of the machine's memory such as 50%%", s)
	}
	return n * multiplier, nil
}

// MachineMemory is the memory hoard may count on, in bytes: MemTotal from
// /proc/meminfo, or the cgroup v2 limit when that is lower (a container).
// 0 when unknown.
func MachineMemory() int64 {
	total := int64(0)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			fields := strings.Fields(scanner.Text())
			if len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					total = kb << 10
				}
			}
		}
		f.Close()
	}
	if raw, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if limit, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil && limit > 0 && (total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}
