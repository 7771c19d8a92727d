package plugins

import "errors"

// Errors the host returns instead of a plugin's answer. Test with errors.Is.
var (
	// ErrUnavailable: the plugin is not running (starting, restarting,
	// stopped or failed for good).
	ErrUnavailable = errors.New("plugin is not running")
	// ErrBusy: too many of the plugin's calls are still running past their
	// deadline (a hung plugin), so the host refuses to pile up more.
	ErrBusy = errors.New("plugin is busy: earlier calls are still running past their deadline")
	// ErrIncompatible: the plugin binary speaks another plugin protocol
	// version than this hoard. Restarting will not help; rebuilding will.
	ErrIncompatible = errors.New("plugin protocol version mismatch")
	// ErrPanicked: an in-process plugin panicked during a call. The host
	// recovers, reports this error and restarts the plugin.
	ErrPanicked = errors.New("plugin panicked")
	// ErrNotOwned: a tick or a HostAPI call named an item of no item type
	// the plugin owns, or a project none of its item types lives in.
	ErrNotOwned = errors.New("item belongs to no item type of the plugin")
)

// ErrNoAPI: the plugin binary predates HandleRequest (its gRPC server
// answers Unimplemented), so it serves no API of its own.
var ErrNoAPI = errors.New("plugin serves no API of its own")
