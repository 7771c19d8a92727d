// Package chaos holds hoard's chaos suite, in its tests only: the real
// hoard and hoard-bittorrent binaries on one real redis-server, under 32
// warriors speaking the warrior API, while frontends, the plugin process
// and redis-server are killed with SIGKILL and restarted; then a check,
// from Redis directly, that every item is in exactly one place.
//
// `go test ./internal/chaos` (part of `make test`) runs a short version;
// `make chaos` runs it for minutes (HOARD_CHAOS_DURATION, HOARD_CHAOS_ITEMS,
// HOARD_CHAOS_SEED; HOARD_CHAOS_DEBUG=1 prints every failed warrior
// request).
package chaos
