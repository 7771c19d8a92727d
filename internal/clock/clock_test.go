package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFakeMovesOnlyWhenToldAndWakesWaiters(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewFake(start)
	require.Equal(t, start, c.Now())
	soon, later := c.After(time.Second), c.After(time.Minute)
	select {
	case <-soon:
		t.Fatal("fired before Advance")
	default:
	}
	c.Advance(time.Second)
	require.Equal(t, start.Add(time.Second), <-soon)
	select {
	case <-later:
		t.Fatal("fired early")
	default:
	}
	c.Advance(time.Hour)
	require.Equal(t, start.Add(time.Second+time.Hour), <-later)
	require.Equal(t, start.Add(time.Second+time.Hour), <-c.After(0), "d <= 0 fires at once")

	var _ Clock = System{}
	require.WithinDuration(t, time.Now(), System{}.Now(), time.Second)
}
