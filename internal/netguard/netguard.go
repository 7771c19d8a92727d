// Package netguard keeps hoard's outbound requests where the operator
// meant them. The webhook and the external trackers are URLs an operator
// (or an admin API caller) types in; without a guard, one pointing at
// 127.0.0.1, 169.254.169.254 or a LAN address makes hoard fetch from
// inside the network and store or forward the reply (server-side request
// forgery).
//
// A Policy refuses the special ranges unless the operator allows them:
// it is checked on every connection, on the address actually dialled
// (Control, a net.Dialer hook that runs after name resolution), so a name
// that resolves to a public address when it is registered and to a
// private one later (DNS rebinding) is still refused; CheckHost also
// refuses a literal address or "localhost" when the URL is set, so the
// operator hears of it at once.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrRefused marks an address the policy refuses.
var ErrRefused = errors.New("refused outbound address")

// refused are the ranges an outbound request may not reach unless
// allowed, each with the reason the error gives.
var refused = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (RFC 6598)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private (RFC 1918)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (and broadcast)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "unique local (private)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Policy says which special addresses outbound requests may reach. The
// zero Policy refuses every range listed above.
type Policy struct {
	// AllowPrivate lets every address through: a site on the same host
	// or LAN, or tests.
	AllowPrivate bool
	// Allow are the prefixes let through although a range above holds
	// them (a site at 10.1.2.3: "10.1.2.3/32").
	Allow []netip.Prefix
}

// ParseAllow reads an allowlist of CIDRs ("10.0.0.0/8") or single
// addresses ("10.1.2.3"), naming the bad entry in its error.
func ParseAllow(entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for i, e := range entries {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("allowed target %d (%q) is not a CIDR like 10.0.0.0/8 or an address like 10.1.2.3", i, e)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Check refuses addr if it is in a refused range the policy does not
// allow. An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is checked as the
// IPv4 address it is.
func (p Policy) Check(addr netip.Addr) error {
	if !addr.IsValid() {
		return fmt.Errorf("%w: no address", ErrRefused)
	}
	addr = addr.Unmap().WithZone("")
	if p.AllowPrivate {
		return nil
	}
	for _, a := range p.Allow {
		if a.Contains(addr) {
			return nil
		}
	}
	for _, r := range refused {
		if r.prefix.Contains(addr) {
			return fmt.Errorf("%w: %s is %s; allow it with allow_private_targets or allowed_targets", ErrRefused, addr, r.why)
		}
	}
	return nil
}

// CheckHost is the check when a URL is set: a literal address is checked
// now, and so is "localhost" (which always names loopback, RFC 6761); any
// other name is checked when it is dialled, on what it resolves to then.
func (p Policy) CheckHost(host string) error {
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return p.Check(a)
	}
	if lower := strings.ToLower(host); lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		err := p.Check(netip.MustParseAddr("127.0.0.1"))
		if err != nil && p.Check(netip.IPv6Loopback()) == nil {
			return nil
		}
		return err
	}
	return nil
}

// Control is a net.Dialer Control hook: it runs after the name was
// resolved, on the address about to be connected to, and refuses it
// when the policy does.
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read the address %q", ErrRefused, address)
	}
	return p.Check(ap.Addr())
}

// Dialer returns a dialer with the timeout that dials only addresses the
// policy allows.
func (p Policy) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: p.Control}
}
