package http1

import "syscall"

// deferAcceptSeconds is how long the kernel holds a connection that sent
// nothing before handing it to accept anyway (rounded up to its SYN-ACK
// retransmits: 1 s is one).
const deferAcceptSeconds = 1

// deferAccept sets TCP_DEFER_ACCEPT on the listening socket. A failure
// is not an error: the listener then accepts as usual.
func deferAccept(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, deferAcceptSeconds)
	})
}
