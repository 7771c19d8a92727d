#!/usr/bin/env python3
"""Split a Go CPU profile of hoard serve by owner (the deepest frame of a known
component, leaf up) and by what the leaf does (syscall, malloc/GC, scheduler).
Usage: contrib/pprof-split.py bin/hoard PROFILE... (docs/warrior-path.md)
"""
import subprocess, sys, re, collections

OWNERS = [  # checked for each frame from the leaf upward; first match owns the sample
    ("go-redis", r"github\.com/redis/go-redis"),
    ("callbatch/Batcher", r"hoard/internal/(callbatch|luascript)"),
    ("counters/publish (queues)", r"hoard/queues\.\(\*(counterBuffer|logPusher|Engine)\)\.(RunCounterFlusher|flush|push)|hoard/queues\..*(Flush|flush|publish|Publish)"),
    ("engine (queues)", r"hoard/queues"),
    ("JSON", r"^encoding/json"),
    ("logging", r"^log/slog|hoard/internal/ratelog"),
    ("metrics", r"prometheus|server\.New\.\(\*Metrics\)\.Middleware|server\.\(\*Metrics\)"),
    ("error middleware", r"server\.New\.renderErrors|server\.renderErrors"),
    ("warrior handler", r"hoard/server\."),
    ("gin", r"github\.com/gin-gonic"),
    ("net/http", r"^net/http|^net/textproto"),
    ("accept", r"^net\.\(\*TCPListener\)|^net\.\(\*netFD\)\.accept"),
    ("GC (background)", r"runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|forEachP|gcStart|gcMarkDone|gcMarkTermination)"),
    ("scheduler/idle", r"runtime\.(mcall|schedule|findRunnable|park_m|goexit0|mstart|sysmon|netpoll)"),
]
KINDS = [
    ("syscall", r"Syscall|runtime\.(futex|epollwait|write1|read|usleep|nanosleep|madvise|mmap|tgkill|sched_yield)"),
    ("malloc/GC", r"runtime\.(mallocgc|gcAssist|gcDrain|scanobject|scanObject|markBits|greyobject|sweep|memclrNoHeapPointers|growslice|makeslice|newobject|mcache|nextFree|wbBuf|bulkBarrier|gcWrite|heapBits|typePointers|tryDeferToSpanScan|scanSpan)|internal/runtime/gc"),
    ("scheduler", r"runtime\.(schedule|findRunnable|gopark|goready|ready|runqget|runqput|lock2|unlock2|chansend|chanrecv|selectgo|notewakeup|wakep|startm|stopm|netpoll|park_m|execute|casgstatus|resetspinning|mPark|semrelease|semacquire|procyield|osyield)"),
]

def traces(path, binary):
    out = subprocess.run(["go", "tool", "pprof", "-traces", binary, path], capture_output=True, text=True).stdout
    for block in out.split("-----------+-------------------------------------------------------")[1:]:
        lines = [l for l in block.strip("\n").split("\n") if l.strip()]
        if not lines: continue
        m = re.match(r"\s*([\d.]+)(ms|s|us)\s+(.*)", lines[0])
        if not m: continue
        v = float(m.group(1)) * {"ms": 1, "s": 1000, "us": 0.001}[m.group(2)]
        frames = [m.group(3).strip()] + [l.strip() for l in lines[1:]]
        frames = [re.sub(r"\s*\(inline\)$", "", f) for f in frames]
        yield v, frames

def classify(frames, table, default):
    for f in frames:
        for name, pat in table:
            if re.search(pat, f): return name
    return default

def main():
    binary, paths = sys.argv[1], sys.argv[2:]
    owner = collections.Counter(); kind = collections.Counter(); both = collections.Counter(); total = 0
    for p in paths:
        for v, frames in traces(p, binary):
            o = classify(frames, OWNERS, "other runtime")
            k = classify(frames[:1], KINDS, "other")
            if k == "other":  # leaf inside a runtime helper called by malloc etc.
                k = classify(frames[:6], KINDS[1:2], "code")
            owner[o] += v; kind[k] += v; both[(o, k)] += v; total += v
    print(f"{total:.0f} ms of samples in {len(paths)} profile(s)")
    kinds = [k for k, _ in KINDS] + ["code"]
    print(f"{'owner':28s} {'share':>6s}  " + "  ".join(f"{k:>9s}" for k in kinds))
    for o, v in owner.most_common():
        print(f"{o:28s} {100*v/total:5.1f}%  " + "  ".join(f"{100*both[(o,k)]/total:8.1f}%" for k in kinds))
    print(f"{'all':28s} {100.0:5.1f}%  " + "  ".join(f"{100*kind[k]/total:8.1f}%" for k in kinds))
main()
