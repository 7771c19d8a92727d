package http1

import (
	"syscall"
)

// writeFinal sends the connection's last answer with MSG_MORE: the kernel
// holds it until the close that follows, which sends it with the FIN in
// one segment. A close after a plain write sends two (the answer, then
// the FIN), each transmitted, received and acknowledged on its own: on
// loopback the sender pays for the receiver's side of each too. The
// close right after flushes the held bytes at once (tcp_send_fin sets
// FIN on the queued segment), so nothing waits for the cork's timer; and
// it is a graceful close: the answer is sent whole before the FIN, as
// with a plain write. ok is false when the socket does not allow it (not
// a TCP socket): the caller then writes as usual.
//
// A raw connection (raw_linux.go) sends it without waiting; only what
// the kernel does not take at once goes on through the promoted
// connection, under the write deadline.
func (c *Conn[S]) writeFinal(b []byte) (ok bool, err error) {
	if c.raw {
		n, err := c.rawSend(b, syscall.MSG_MORE)
		if err != errWouldWait {
			return true, err
		}
		b = b[n:]
	}
	sc, isSys := c.nc.(syscall.Conn)
	if !isSys {
		return false, nil
	}
	rc, rerr := sc.SyscallConn()
	if rerr != nil {
		return false, nil
	}
	c.pending, c.pendingErr = b, nil
	if c.sendMore == nil {
		c.sendMore = c.sendPendingMore
	}
	if werr := rc.Write(c.sendMore); werr != nil {
		c.pending = nil
		return true, werr
	}
	err = c.pendingErr
	c.pending, c.pendingErr = nil, nil
	return true, err
}

// sendPendingMore is writeFinal's RawConn.Write callback: it sends
// c.pending with MSG_MORE, and asks to wait for the socket to drain
// (under the write deadline, set then) when the kernel takes only part
// of it.
func (c *Conn[S]) sendPendingMore(fd uintptr) bool {
	for len(c.pending) > 0 {
		n, err := syscall.SendmsgN(int(fd), c.pending, nil, nil, syscall.MSG_MORE|syscall.MSG_NOSIGNAL)
		if n > 0 {
			c.pending = c.pending[n:]
		}
		switch err {
		case nil:
		case syscall.EINTR:
		case syscall.EAGAIN:
			// The socket is full: RawConn.Write waits for it to drain,
			// under the write deadline, set now and not before.
			c.ArmWrite()
			return false
		default:
			c.pendingErr = err
			return true
		}
	}
	return true
}
