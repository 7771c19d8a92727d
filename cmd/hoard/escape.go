package main

import (
	"fmt"
	"io"
)

// controlEscaper writes export lines with their control characters (C0
// but tab and the newline that ends each line, DEL, C1: what
// queues.FindControl refuses) as \xNN or \u00NN, so an item queued
// before hoard refused them cannot drive the terminal it is printed on
// (ESC [ … m recolours it, other sequences retitle windows or move the
// cursor). Such an item cannot be queued again as it was anyway, so the
// escape costs no round trip; Escaped counts them for a warning.
type controlEscaper struct {
	w       io.Writer
	held    bool // a 0xC2 ended the last write: it may start a C1
	Escaped int
	buf     []byte
}

func (e *controlEscaper) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	e.buf = e.buf[:0]
	i := 0
	if e.held {
		e.held = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] <= 0x9f {
			e.buf = fmt.Appendf(e.buf, `\u%04x`, p[0])
			e.Escaped++
			i = 1
		} else {
			e.buf = append(e.buf, 0xc2)
		}
	}
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c < 0x20 && c != '\t' && c != '\n', c == 0x7f:
			e.buf = fmt.Appendf(e.buf, `\x%02x`, c)
			e.Escaped++
		case c == 0xc2 && i+1 == len(p):
			e.held = true
		case c == 0xc2 && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			e.buf = fmt.Appendf(e.buf, `\u%04x`, p[i+1])
			e.Escaped++
			i++
		default:
			e.buf = append(e.buf, c)
		}
	}
	if _, err := e.w.Write(e.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes a held 0xC2 that nothing followed.
func (e *controlEscaper) Close() error {
	if e.held {
		e.held = false
		_, err := e.w.Write([]byte{0xc2})
		return err
	}
	return nil
}
