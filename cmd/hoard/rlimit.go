package main

import (
	"log/slog"
	"syscall"

	"github.com/hoardproject/hoard/leaderboard"
)

// raiseDescriptorLimit lifts the soft RLIMIT_NOFILE to the hard limit and
// returns the soft limit in force afterwards, from which the viewer cap
// is derived. Go's runtime already raises the limit for itself since Go
// 1.19, but restores the old one for the processes it starts; setting it
// here hands redis-server and the plugins the raised limit too, and puts
// the figure in the log. A failure keeps the old limit and says so.
func raiseDescriptorLimit(logger *slog.Logger) uint64 {
	soft, hard, err := leaderboard.DescriptorLimit()
	if err != nil {
		logger.Warn("cannot read the descriptor limit (RLIMIT_NOFILE); viewers are capped as if it were 4096", "err", err)
		return 4096
	}
	before := soft
	if soft < hard {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: hard, Max: hard}); err != nil {
			logger.Warn("cannot raise the descriptor limit to the hard limit", "soft", soft, "hard", hard, "err", err)
		} else {
			soft = hard
		}
	}
	logger.Info("descriptor limit (RLIMIT_NOFILE)", "soft_before", before, "soft", soft, "hard", hard)
	return soft
}
