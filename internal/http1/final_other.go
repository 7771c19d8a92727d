//go:build !linux

package http1

// writeFinal: MSG_MORE is Linux's; elsewhere the last answer is written
// as any other.
func (c *Conn[S]) writeFinal([]byte) (ok bool, err error) { return false, nil }
