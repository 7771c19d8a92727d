package pluginhost

import (
	"strconv"
	"time"
)

// Every Redis key the host writes is built here. A plugin's keys carry the
// plugin's name as hash tag ("{name}"); names are validated to hold no
// brace. No script touches these keys: each is read or written by one plain
// command.

func pluginPrefix(name string) string { return "hoard:plugin:{" + name + "}:" }

// jobLeaseKey holds the owner of a job's current period (STRING with a TTL
// just under the period), so one tick runs per period across every hoard
// frontend and across restarts. The period is part of the name: a job
// whose period was shortened (4h to 1m) is not held back by the lease
// taken under the old one, which expires by itself.
func jobLeaseKey(plugin, job string, period time.Duration) string {
	return pluginPrefix(plugin) + "lease:job:" + job + ":" + strconv.FormatInt(period.Milliseconds(), 10)
}

// ownedProjectsKey maps each project a plugin's item types live in to its
// owner and the types' public flags (HASH: project -> JSON ProjectOwner),
// so every frontend keeps the project closed to the public warrior API
// even while the plugin is down or has not described itself yet.
const ownedProjectsKey = "hoard:plugins:projects"
