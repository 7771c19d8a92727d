package leaderboard

import (
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Every viewer holds one file descriptor for as long as it watches. With
// the viewer cap at the process's descriptor limit, idle viewers from one
// client once took every descriptor: accept failed with "too many open
// files" and /healthz and the warrior API went dark. So the total cap is
// derived from the limit, with room kept for everything else a frontend
// holds open: warriors' connections, the Redis pool and subscription,
// plugins' pipes, log and segment files.

// DefaultMaxViewersPerAddress is how many viewers one client address (an
// IPv4 address, or an IPv6 /64) may hold on one frontend: plenty for a
// household of tabs, few enough that one client cannot crowd out others.
const DefaultMaxViewersPerAddress = 50

// Descriptors kept for the rest of the process: a quarter of the limit,
// and at least half of it up to keptForOthersFloor (so a small limit is
// split evenly, and a large one keeps 1,024 or more).
const (
	keptForOthersFloor = 1024
	// keptForOthersMin is the least kept at any limit: a frontend with
	// no viewers and no warriors holds a few dozen descriptors already.
	keptForOthersMin = 128
)

// ViewerCap is how many viewers fit under a descriptor limit of nofile
// while keeping room for the rest of the process:
// nofile − max(nofile/4, min(1024, max(nofile/2, 128))), never below 0.
// 256 gives 128, 1,024 gives 512, 4,096 gives 3,072, 20,000 gives 15,000.
func ViewerCap(nofile uint64) int {
	kept := max(nofile/4, min(keptForOthersFloor, max(nofile/2, keptForOthersMin)))
	if nofile <= kept {
		return 0
	}
	// An unlimited descriptor limit (RLIM_INFINITY) still needs an int.
	return int(min(nofile-kept, 1<<31-1))
}

// MaxViewersFor resolves the total cap for a frontend whose descriptor
// limit is nofile: explicit when the operator set one (explicit > 0) and
// it fits, else ViewerCap(nofile). lowered reports an explicit value
// above what the limit allows, which the caller should warn about.
func MaxViewersFor(explicit int, nofile uint64) (total int, lowered bool) {
	derived := ViewerCap(nofile)
	switch {
	case explicit <= 0:
		return derived, false
	case explicit > derived:
		return derived, true
	default:
		return explicit, false
	}
}

// DescriptorLimit returns the process's soft and hard RLIMIT_NOFILE.
func DescriptorLimit() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	return lim.Cur, lim.Max, nil
}

// AddressKey is the per-address bucket a viewer counts against: the IPv4
// address itself, or the /64 of an IPv6 address (one subscriber usually
// holds a whole /64, so counting single IPv6 addresses would not bound a
// client at all). An IPv4-mapped IPv6 address counts as IPv4. Anything
// that is not an IP address is its own bucket.
func AddressKey(client string) string {
	addr, err := netip.ParseAddr(strings.TrimSpace(client))
	if err != nil {
		return client
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is4() {
		return addr.String()
	}
	return netip.PrefixFrom(addr, 64).Masked().String()
}

// SetViewerLimits changes the viewer caps and the idle timeout while the
// hub runs (hoard serve's SIGHUP). maxViewers is the resolved total cap
// (MaxViewersFor); a zero per-address cap or idle timeout takes its
// default, as New does. Viewers already connected stay, even past a
// lowered cap: only new ones are counted against the new caps.
func (h *Hub) SetViewerLimits(maxViewers, perAddress int, idle time.Duration) {
	if perAddress <= 0 {
		perAddress = DefaultMaxViewersPerAddress
	}
	if idle <= 0 {
		idle = DefaultViewerIdleTimeout
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cfg.MaxViewers = max(maxViewers, 0)
	h.cfg.MaxViewersPerAddress = perAddress
	h.cfg.IdleTimeout = idle
	// Pings must still come well within the idle timeout.
	h.cfg.PingEvery = min(h.cfg.PingEvery, idle/2)
}
