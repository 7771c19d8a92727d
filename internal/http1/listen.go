package http1

import (
	"context"
	"net"
)

// Listen opens a TCP listener for a Server.
//
// No TCP keep-alive probes on its connections: each is bounded by the
// Server's own timeouts (a head by ReadHeaderTimeout, a body by
// ReadTimeout, an answer by WriteTimeout, a kept-alive connection by
// IdleTimeout), so a dead peer is found by those, and the probes'
// setsockopt calls were a tenth to a quarter of accepting a connection.
//
// On Linux a connection is accepted only once its first bytes have come
// (TCP_DEFER_ACCEPT, listen_linux.go): HTTP clients speak first, so the
// first read finds the request instead of parking the worker until it
// comes, and a client that connects and sends nothing costs no accept
// and no worker for the first seconds. Such a client is accepted when
// the kernel gives up deferring, and then ReadHeaderTimeout cuts it off.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: deferAccept}
	return lc.Listen(ctx, "tcp", addr)
}
