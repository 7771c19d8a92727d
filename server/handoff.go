package server

import (
	"io"
	"net"
	"sync"
)

// handoffListener is the net.Listener net/http's Server serves: the
// warrior listener accepts every connection on the main port and gives it
// here, with the bytes it already read, when a request is not one it
// answers itself (warriorconn.go).
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn // unbuffered: a connection given is one accepted
	done  chan struct{}
	once  sync.Once
	err   error // what Accept returns once done is closed
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for a connection given, or the listener's end.
func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, l.err
	}
}

// Close ends Accept with net.ErrClosed (net/http's Shutdown calls it).
func (l *handoffListener) Close() error {
	l.closeWith(net.ErrClosed)
	return nil
}

// closeWith ends Accept with err: the main port's accept failed for good,
// and net/http's Serve returns err, as it did when it accepted itself.
func (l *handoffListener) closeWith(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give hands c to net/http; false once the listener is closed (the caller
// closes c).
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// replayConn is a connection handed to net/http: its reads return first
// the bytes the warrior listener had read, then the socket's.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite lets net/http half-close after an error answer, as it does
// on a bare TCP connection, so the client reads the answer before the
// close.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the socket's sendfile for net/http's file answers.
func (c *replayConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(c.Conn, r)
}
