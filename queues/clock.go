package queues

import (
	"time"

	"github.com/hoardproject/hoard/internal/clock"
)

// Clock tells the time (internal/clock, hoard's one clock). Every deadline
// and timestamp this package stores is computed from it, so tests move time
// without sleeping.
type Clock = clock.Clock

// SystemClock is the wall clock.
type SystemClock = clock.System

// FakeClock is a Clock that only moves when told to.
type FakeClock = clock.Fake

// NewFakeClock returns a FakeClock set to start.
func NewFakeClock(start time.Time) *FakeClock { return clock.NewFake(start) }
