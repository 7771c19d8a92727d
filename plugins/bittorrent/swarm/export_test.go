package swarm

// SetPruneHook makes Repair's index prune call fn between its read of the
// torrents and the removal of their entries, so a test can race it.
func SetPruneHook(s *Store, fn func()) { s.pruneHook = fn }
