package bittorrent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// AnnouncePolicy is what both listeners apply to every announce before the
// Swarms sees it, and to every response after.
type AnnouncePolicy struct {
	// Interval and MinInterval are sent to clients unless the Swarms
	// response sets its own (non-zero) values. Interval defaults to 30m, as
	// in chihaya and opentracker; MinInterval to half of Interval.
	Interval    time.Duration
	MinInterval time.Duration
	// DefaultNumWant applies when the client names no numwant (default 50);
	// MaxNumWant caps what it may ask for (default 100).
	DefaultNumWant int
	MaxNumWant     int
	// RequirePasskey refuses announces and scrapes without a passkey
	// (private mode). In open mode a passkey, if present, is still passed on.
	RequirePasskey bool
	// TrustClientIP uses the address the client claims (HTTP ip parameter,
	// UDP IPv4 field) instead of the socket's. Off by default: it lets
	// anyone point a swarm at a third party.
	TrustClientIP bool
	// Guard limits announces and passkey misses per address (the socket's
	// or the trusted proxy's, never the one a client claims); share one
	// between a frontend's listeners. Nil sets no limits.
	Guard *Guard
}

// Policy defaults.
const (
	DefaultInterval       = 30 * time.Minute
	DefaultNumWant        = 50
	DefaultMaxNumWant     = 100
	DefaultMaxScrapeCount = 64 // opentracker's OT_MAXMULTISCRAPE_COUNT
)

func (p *AnnouncePolicy) withDefaults() AnnouncePolicy {
	out := *p
	if out.Interval <= 0 {
		out.Interval = DefaultInterval
	}
	if out.MinInterval <= 0 {
		out.MinInterval = out.Interval / 2
	}
	if out.MaxNumWant <= 0 {
		out.MaxNumWant = DefaultMaxNumWant
	}
	if out.DefaultNumWant <= 0 {
		out.DefaultNumWant = DefaultNumWant
	}
	out.DefaultNumWant = min(out.DefaultNumWant, out.MaxNumWant)
	return out
}

func (p *AnnouncePolicy) validate() error {
	if p.MinInterval > p.Interval {
		return fmt.Errorf("MinInterval %s is longer than Interval %s", p.MinInterval, p.Interval)
	}
	return nil
}

// numWant turns the client's numwant (-1 when absent) into what the Swarms
// is asked for. A stopping peer needs none.
func (p *AnnouncePolicy) numWant(requested int, event Event) int {
	if event == EventStopped {
		return 0
	}
	if requested < 0 {
		return p.DefaultNumWant
	}
	return min(requested, p.MaxNumWant)
}

// reply fills in the intervals the Swarms left unset.
func (p *AnnouncePolicy) reply(resp *AnnounceResponse) wire.AnnounceReply {
	interval, minInterval := resp.Interval, resp.MinInterval
	if interval <= 0 {
		interval = p.Interval
	}
	if minInterval <= 0 {
		minInterval = p.MinInterval
	}
	return wire.AnnounceReply{
		Interval:    int64(interval / time.Second),
		MinInterval: int64(minInterval / time.Second),
		Complete:    resp.Complete,
		Incomplete:  resp.Incomplete,
		Downloaded:  resp.Downloaded,
	}
}

// errPasskeyRequired refuses a request without a passkey in private mode.
var errPasskeyRequired = &ClientError{Reason: "this tracker requires a passkey in the announce URL"}

// peerList renders Swarms peers without copying them.
type peerList []Peer

func (l peerList) Len() int                            { return len(l) }
func (l peerList) At(i int) ([20]byte, netip.AddrPort) { return l[i].ID, l[i].Addr }

// internalFailure is what a client reads when the store fails: no details,
// they are in the log.
const internalFailure = "internal tracker error, try again later"

// refusal splits a Swarms error into what the client may read. internal is
// true when the error is not a ClientError, i.e. the store failed.
func refusal(err error) (reason string, internal bool) {
	if ce, ok := errors.AsType[*ClientError](err); ok {
		return ce.Reason, false
	}
	return internalFailure, true
}

// ListenerStats counts what a listener answered, for metrics. Each
// request is counted once: a refusal by the guard is not also Refused.
type ListenerStats struct {
	Announces      uint64 // answered with peers
	Scrapes        uint64 // answered with counts
	Connects       uint64 // UDP connection ids issued
	Malformed      uint64 // refused by the parser
	Refused        uint64 // refused by the Swarms (ClientError) or policy
	InternalErrors uint64 // Swarms failures
	RateLimited    uint64 // announces refused by the guard's per-address rate
	PasskeyBlocked uint64 // refused unread: the address presented too many unknown passkeys
	PasskeyMisses  uint64 // refused by the Swarms for an unknown passkey (also in Refused)
	FullScrapes    uint64 // full scrapes answered (also in Scrapes)
}

type listenerCounters struct {
	announces, scrapes, connects, malformed, refused, internalErrors atomic.Uint64
	rateLimited, passkeyBlocked, passkeyMisses, fullScrapes          atomic.Uint64

	// failures logs the store's failures at most once a minute per op
	// (while Redis is down every announce fails: one line a minute with
	// a count, not one per announce); internalErrors counts them all.
	failuresOnce sync.Once
	failures     *ratelog.Log
}

func (c *listenerCounters) snapshot() ListenerStats {
	return ListenerStats{
		Announces:      c.announces.Load(),
		Scrapes:        c.scrapes.Load(),
		Connects:       c.connects.Load(),
		Malformed:      c.malformed.Load(),
		Refused:        c.refused.Load(),
		InternalErrors: c.internalErrors.Load(),
		RateLimited:    c.rateLimited.Load(),
		PasskeyBlocked: c.passkeyBlocked.Load(),
		PasskeyMisses:  c.passkeyMisses.Load(),
		FullScrapes:    c.fullScrapes.Load(),
	}
}

// countRefusal counts a Swarms error and logs internal ones. An unknown
// passkey also counts as a miss of the address ip on the guard.
func (c *listenerCounters) countRefusal(ctx context.Context, logger *slog.Logger, op string, err error,
	guard *Guard, ip netip.Addr, passkey string) string {
	reason, internal := refusal(err)
	if internal {
		c.internalErrors.Add(1)
		c.failuresOnce.Do(func() { c.failures = ratelog.New(ratelog.Config{Logger: logger}) })
		c.failures.Log(ctx, slog.LevelError, "swarm_store_failed/"+op, "swarm store failed", "op", op, "err", err)
		return reason
	}
	c.refused.Add(1)
	if errors.Is(err, ErrUnknownPasskey) {
		c.passkeyMisses.Add(1)
		guard.passkeyMiss(ip, passkey)
	}
	return reason
}

// admit applies the guard to a request from ip, before the Swarms sees
// it: the announce rate (announces only), then the passkey misses
// (requests with a passkey). It returns the refusal, counted, or nil.
func (c *listenerCounters) admit(guard *Guard, ip netip.Addr, announce bool, passkey string) *ClientError {
	if announce && !guard.allowAnnounce(ip) {
		c.rateLimited.Add(1)
		return errRateLimited
	}
	if passkey != "" && guard.passkeyBlocked(ip) {
		c.passkeyBlocked.Add(1)
		return errPasskeyMisses
	}
	return nil
}
