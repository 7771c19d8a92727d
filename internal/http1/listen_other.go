//go:build !linux

package http1

import "syscall"

// deferAccept: TCP_DEFER_ACCEPT is Linux's; elsewhere the listener
// accepts as usual.
func deferAccept(_, _ string, _ syscall.RawConn) error { return nil }
