package server

import (
	"fmt"
	"net"
	"strings"
)

// trustedProxies reads a client's address the way gin's Context.ClientIP
// does under the server's settings (SetTrustedProxies with
// Config.TrustedProxies, the default remote IP headers X-Forwarded-For and
// X-Real-IP, no trusted platform), for the warrior listener, which serves
// its calls without gin. TestClientIPIsGins holds the two to one answer.
type trustedProxies []*net.IPNet

// parseTrustedProxies reads the list as gin's SetTrustedProxies does: an
// address without a prefix length is a single host.
func parseTrustedProxies(list []string) (trustedProxies, error) {
	var nets trustedProxies
	for _, s := range list {
		if !strings.Contains(s, "/") {
			ip := net.ParseIP(s)
			if ip == nil {
				return nil, fmt.Errorf("trusted proxy %q is not an address", s)
			}
			if ip.To4() != nil {
				s += "/32"
			} else {
				s += "/128"
			}
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
		}
		nets = append(nets, n)
	}
	return nets, nil
}

func (t trustedProxies) contains(ip net.IP) bool {
	for _, n := range t {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}

// remote reads a connection's remote address (net.Conn's RemoteAddr
// string, as net/http gives it to gin): its address, whether it is a
// trusted proxy, and the client address gin answers when no header names
// another ("" for an address it cannot read).
func (t trustedProxies) remote(remoteAddr string) (ip net.IP, trusted bool, clientIP string) {
	host, _, err := net.SplitHostPort(strings.TrimSpace(remoteAddr))
	if err != nil {
		return nil, false, ""
	}
	ip = net.ParseIP(host)
	if ip == nil {
		return nil, false, ""
	}
	return ip, t.contains(ip), ip.String()
}

// forwarded reads one remote IP header's value as gin's validateHeader
// does: from the right, the first address that is not a trusted proxy (or
// the leftmost); ok is false for an empty header or a malformed entry met
// before one.
func (t trustedProxies) forwarded(header string) (string, bool) {
	if header == "" {
		return "", false
	}
	items := strings.Split(header, ",")
	for i := len(items) - 1; i >= 0; i-- {
		s := strings.TrimSpace(items[i])
		ip := net.ParseIP(s)
		if ip == nil {
			break
		}
		if i == 0 || !t.contains(ip) {
			return s, true
		}
	}
	return "", false
}
