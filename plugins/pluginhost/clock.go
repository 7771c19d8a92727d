package pluginhost

import "time"

// Clock tells the host the time and wakes it up. Job schedules, health
// checks, restart back-off and event timestamps all read it, so tests
// replace it to move time without sleeping.
type Clock interface {
	Now() time.Time
	// After sends the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
