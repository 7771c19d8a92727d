package http1_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/http1"
)

// The kept second is net/http's text for any time, the second's turn
// included, and a repeat within the second allocates nothing.
func TestAppendDateIsNetHTTPs(t *testing.T) {
	base := time.Date(2026, 11, 30, 23, 59, 58, 900_000_000, time.FixedZone("CET", 3600))
	for _, step := range []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond, time.Second, 0, 36 * time.Hour, -time.Hour} {
		base = base.Add(step)
		require.Equal(t, base.UTC().Format(http.TimeFormat), string(http1.AppendDate([]byte("x"), base))[1:], "at %v", base)
	}
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() { buf = http1.AppendDate(buf[:0], base) })
	require.Zero(t, allocs)
}
