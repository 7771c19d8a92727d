package pluginhost

import "github.com/hoardproject/hoard/internal/clock"

// Clock tells the host the time and wakes it up (internal/clock, hoard's
// one clock). Job schedules, health checks, restart back-off and event
// timestamps all read it, so tests replace it to move time without
// sleeping.
type Clock = clock.Clock

// SystemClock is the wall clock.
type SystemClock = clock.System
