package http1

import (
	"net/http"
	"sync/atomic"
	"time"
)

// AppendDate appends now as an HTTP Date header value (http.TimeFormat,
// in UTC), as net/http writes it. The text changes once a second and a
// busy listener answers thousands of times in one, so the formatted
// second is kept and copied: formatting it per answer was 1-2% of a
// warrior round trip's CPU.
func AppendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return append(b, d.text...)
	}
	d := &formattedDate{sec: sec}
	d.text = now.UTC().AppendFormat(d.buf[:0], http.TimeFormat)
	// Two answers at a second's turn may both format it; either is right.
	lastDate.Store(d)
	return append(b, d.text...)
}

// formattedDate is one second's Date text.
type formattedDate struct {
	sec  int64
	buf  [len(http.TimeFormat) + 4]byte
	text []byte
}

var lastDate atomic.Pointer[formattedDate]
