//go:build !linux

package http1

import (
	"errors"
	"net"
	"net/netip"
)

// Elsewhere every connection is accepted by net (raw_linux.go says what
// Linux skips): newRawAccept returns nil and no Conn is ever raw, so the
// raw calls below are never reached.

type rawAccept struct{}

func newRawAccept(net.Listener) *rawAccept { return nil }

func (*rawAccept) close() {}

func (*rawAccept) next() (int, netip.AddrPort, error) {
	return -1, netip.AddrPort{}, errors.New("http1: no raw accept here")
}

var errWouldWait = errors.New("http1: raw connection promoted")

func (c *Conn[S]) rawRead([]byte) (int, error)      { return 0, errWouldWait }
func (c *Conn[S]) rawSend([]byte, int) (int, error) { return 0, errWouldWait }
func (c *Conn[S]) closeRaw()                        {}

func (c *Conn[S]) promote() error { c.raw = false; return nil }
