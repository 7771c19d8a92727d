// Package freeport picks a port number to hand to another process (a
// redis-server, aria2c, libtorrent, opentracker, a hoard child) that will
// bind it itself.
//
// The usual trick, listening on 127.0.0.1:0 and closing, returns a port from
// the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range), the
// same range every outgoing connection of every process takes its local port
// from. Between the close and the child's bind, a Redis client, a tracker
// announce or another test package's connection may take it, and the child
// fails with "Address already in use" (CI lost a run to aria2c this way).
// Ports below the ephemeral range are never taken implicitly: only a process
// that binds that exact number can hold one. So freeport picks at random
// below the range, and checks the port binds on every address (the children
// bind 0.0.0.0 or [::], not only 127.0.0.1) for each protocol asked.
//
// What remains is two processes picking the same random number within
// moments of each other, about one chance in twenty thousand per pair;
// callers that can cheaply retry a child on a bind failure still should.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Protocols to check a port on.
const (
	TCP = 1 << iota
	UDP
)

const (
	// rangeFile is where Linux keeps the ephemeral range.
	rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	// defaultLow is Linux's default low end, used where rangeFile cannot be
	// read (other systems: BSD and macOS start theirs at 49152, higher).
	defaultLow = 32768
	// floor keeps clear of the registered services most machines run
	// (databases, web servers below 10000) when the range leaves room.
	floor = 10000
	// minSpan is the fewest candidates worth picking among; below it the
	// floor drops to the first unprivileged port.
	minSpan     = 4096
	unprivFirst = 1024
	attempts    = 200
)

var (
	mu sync.Mutex
	// given holds the ports this process has handed out, so two picks in a
	// row (a redis node's port and its bus port) never return the same
	// number before the first child has bound it.
	given = map[int]bool{}
)

// Get returns a port below the ephemeral range that was free a moment ago on
// every local address for each protocol in protocols (TCP, UDP or both), and
// that this process has not handed out before.
func Get(protocols int) (int, error) {
	if protocols&(TCP|UDP) == 0 || protocols&^(TCP|UDP) != 0 {
		return 0, fmt.Errorf("freeport: protocols must be TCP, UDP or TCP|UDP, not %d", protocols)
	}
	low, err := candidates()
	if err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	var lastErr error
	for range attempts {
		port := low.first + rand.IntN(low.end-low.first)
		if given[port] {
			continue
		}
		if lastErr = bindable(port, protocols); lastErr == nil {
			given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d after %d tries: %w", low.first, low.end-1, attempts, lastErr)
}

// span is the half-open interval [first, end) ports are picked from.
type span struct{ first, end int }

func candidates() (span, error) {
	low, _, err := EphemeralRange()
	if err != nil {
		return span{}, err
	}
	if low-floor >= minSpan {
		return span{floor, low}, nil
	}
	if low-unprivFirst >= minSpan {
		return span{unprivFirst, low}, nil
	}
	return span{}, fmt.Errorf("freeport: the ephemeral range starts at %d, leaving too few ports below it", low)
}

// EphemeralRange is the kernel's range for implicitly bound local ports,
// inclusive at both ends.
func EphemeralRange() (low, high int, err error) {
	raw, err := os.ReadFile(rangeFile)
	if errors.Is(err, os.ErrNotExist) {
		return defaultLow, 65535, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("freeport: %w", err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("freeport: %s holds %q, not two numbers", rangeFile, raw)
	}
	low, errLow := strconv.Atoi(fields[0])
	high, errHigh := strconv.Atoi(fields[1])
	if errLow != nil || errHigh != nil || low < 1 || high > 65535 || low > high {
		return 0, 0, fmt.Errorf("freeport: %s holds %q, not a port range", rangeFile, raw)
	}
	return low, high, nil
}

// bindable binds port on the IPv4 wildcard and, where the host has IPv6, the
// dual-stack wildcard, for each protocol, and releases it. The wildcard binds
// fail when anything holds the port on any single address too.
func bindable(port, protocols int) error {
	p := strconv.Itoa(port)
	if protocols&TCP != 0 {
		for _, network := range []string{"tcp4", "tcp6"} {
			l, err := net.Listen(network, wildcard(network)+p)
			if err != nil {
				if network == "tcp6" && noIPv6(err) {
					continue
				}
				return err
			}
			_ = l.Close()
		}
	}
	if protocols&UDP != 0 {
		for _, network := range []string{"udp4", "udp6"} {
			c, err := net.ListenPacket(network, wildcard(network)+p)
			if err != nil {
				if network == "udp6" && noIPv6(err) {
					continue
				}
				return err
			}
			_ = c.Close()
		}
	}
	return nil
}

func wildcard(network string) string {
	if strings.HasSuffix(network, "6") {
		return "[::]:"
	}
	return "0.0.0.0:"
}

// noIPv6 tells a host without IPv6 (nothing can bind there, so nothing
// can collide) from a port in use.
func noIPv6(err error) bool {
	return !errors.Is(err, syscall.EADDRINUSE)
}
