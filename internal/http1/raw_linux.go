package http1

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"
)

// A connection accepted here starts raw: its socket as accept4 returned
// it, blocking (so that the promotion below needs no poller round trip
// to undo), read and written with MSG_DONTWAIT, and closed with close(2).
// Go's net would register it with the poller (epoll_ctl ADD, and DEL on
// close), ask its local address (getsockname), set TCP_NODELAY, allocate
// its netFD, TCPConn, two addresses and a finalizer, and arm a timer for
// its read deadline: about a fifth of what the plugin paid per connection
// beyond its announce. A connection that closes after one answer, which
// TCP_DEFER_ACCEPT hands over with its request already read, needs none
// of it: its request is read in one call, its answer goes in one call
// with the close's FIN (writeFinal), and nothing ever waits.
//
// Whenever a raw connection would wait (its head is not all there, the
// kernel does not take a whole answer, a kept-alive connection waits for
// its next request, a handler asks for NetConn or Detach), it is promoted
// once to a net.Conn (net.FileConn) and served as every connection was
// before, under the same deadlines: so a raw connection never blocks, and
// never needs a timer. The promotion costs fifteen syscalls (FileConn's
// dup, flags, address and keep-alive calls, then the keep-alive turned
// off and the raw descriptor closed) against the three net's accept
// would have paid, once per connection that waits: for a kept-alive
// connection, once over all its requests.

// rawAccept accepts from a TCP listener's socket without net's per
// connection work. It is nil when the listener is not a TCP one: then
// the loop uses ln.Accept.
type rawAccept struct {
	// file is a copy of the listening socket, registered with Go's poller
	// as a file, because a TCPListener's own RawConn offers no Read (no
	// wait for a connection); closed by close, with the listener.
	file *os.File
	rc   syscall.RawConn
	// accept is rc.Read's callback, bound once; fd, remote and err are
	// its result.
	accept func(fd uintptr) bool
	fd     int
	remote netip.AddrPort
	err    error
}

func newRawAccept(ln net.Listener) *rawAccept {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	lrc, err := tl.SyscallConn()
	if err != nil {
		return nil
	}
	dup := -1
	if err := lrc.Control(func(fd uintptr) {
		if nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0); errno == 0 {
			dup = int(nfd)
		}
	}); err != nil || dup < 0 {
		return nil
	}
	// Non-blocking, as net left the listening socket: NewFile registers
	// it with the poller.
	file := os.NewFile(uintptr(dup), "listener")
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil
	}
	a := &rawAccept{file: file, rc: rc}
	a.accept = a.acceptOnce
	return a
}

// close closes the copy of the listening socket: with the listener's
// Close, it stops listening and ends a next waiting.
func (a *rawAccept) close() { _ = a.file.Close() }

// next waits for the next connection and returns its socket and peer.
// A temporary error (out of file descriptors) is a *os.SyscallError
// wrapping the errno, which says Temporary as net's does.
func (a *rawAccept) next() (int, netip.AddrPort, error) {
	a.fd, a.err = -1, nil
	if err := a.rc.Read(a.accept); err != nil {
		return -1, netip.AddrPort{}, err
	}
	return a.fd, a.remote, a.err
}

// acceptOnce is rc.Read's callback: false asks rc.Read to wait for the
// listener to be readable (no connection queued) and call it again.
// ECONNABORTED (a connection reset while queued) is skipped, as net's
// Accept skips it.
func (a *rawAccept) acceptOnce(lfd uintptr) bool {
	for {
		var rsa syscall.RawSockaddrAny
		size := uint32(syscall.SizeofSockaddrAny)
		nfd, _, errno := syscall.Syscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&rsa)),
			uintptr(unsafe.Pointer(&size)), syscall.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
			a.fd, a.remote = int(nfd), sockaddrAddrPort(&rsa)
			return true
		case syscall.EINTR, syscall.ECONNABORTED:
			continue
		case syscall.EAGAIN:
			return false
		default:
			a.err = os.NewSyscallError("accept4", errno)
			return true
		}
	}
}

// sockaddrAddrPort is an accepted peer's address as net's TCPAddr would
// give it (an IPv4 peer of an IPv6 socket as a mapped address), without
// its IPv6 zone.
func sockaddrAddrPort(rsa *syscall.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case syscall.AF_INET:
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	case syscall.AF_INET6:
		sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(rsa))
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

// errWouldWait: a raw connection's read or write would have waited; it
// has been promoted, so the caller retries on NetConn.
var errWouldWait = errors.New("http1: raw connection promoted")

// rawRead reads what the socket holds without waiting: errWouldWait
// (after promoting c) when it holds nothing yet.
func (c *Conn[S]) rawRead(b []byte) (int, error) {
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(c.fd), uintptr(unsafe.Pointer(&b[0])),
			uintptr(len(b)), syscall.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			if n == 0 {
				return 0, io.EOF
			}
			return int(n), nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if err := c.promote(); err != nil {
				return 0, err
			}
			return 0, errWouldWait
		default:
			return 0, os.NewSyscallError("read", errno)
		}
	}
}

// rawSend sends b without waiting, with flags added to MSG_DONTWAIT and
// MSG_NOSIGNAL, and returns how much the kernel took: all of it, or less
// with errWouldWait once c is promoted for the rest.
func (c *Conn[S]) rawSend(b []byte, flags int) (int, error) {
	sent := 0
	for sent < len(b) {
		n, _, errno := syscall.Syscall6(syscall.SYS_SENDTO, uintptr(c.fd), uintptr(unsafe.Pointer(&b[sent])),
			uintptr(len(b)-sent), uintptr(flags|syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL), 0, 0)
		switch errno {
		case 0:
			sent += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			if err := c.promote(); err != nil {
				return sent, err
			}
			return sent, errWouldWait
		default:
			return sent, os.NewSyscallError("write", errno)
		}
	}
	return sent, nil
}

// promote makes a raw connection a net.Conn, for everything that may
// wait. net.FileConn takes a copy of the socket, sets it non-blocking
// and registers it with the poller; the raw descriptor is closed. It
// turns off the TCP keep-alive probes FileConn turns on, as Listen does
// for connections accepted by net. When it fails (out of descriptors),
// the connection's calls fail with its error from here on.
func (c *Conn[S]) promote() error {
	c.raw = false
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f)
	_ = f.Close()
	c.fd = -1
	if err != nil {
		_ = c.srv.adopt(c, failedConn{err})
		return err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetKeepAlive(false)
	}
	return c.srv.adopt(c, nc)
}

// closeRaw closes a raw connection's socket.
func (c *Conn[S]) closeRaw() { _ = syscall.Close(c.fd) }
