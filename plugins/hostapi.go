package plugins

import (
	"context"
	"encoding/json"
	"errors"
)

// HostAPI is what a plugin may ask of hoard: the queue engine's work calls,
// on the projects of the plugin's own item types. It arrives in
// Config.Host: in-process it is the host itself, over gRPC a client of the
// host through go-plugin's broker (Vault's SystemView). A plugin works its
// own items with it (its workers claim, do the step and report done with a
// result) without importing the queue engine or calling the warrior API.
//
// The result of a done reaches the plugin's OnItemDone in the event's
// Result: the plugin applies its transition there, keyed by the item
// name, so a repeated delivery changes nothing.
type HostAPI interface {
	// Enqueue queues items of FIFO item types into the project's todo
	// queue and returns how many were queued (items out or done already
	// are skipped).
	Enqueue(ctx context.Context, project string, items []string) (int, error)
	// EnqueueScored puts items of score-ordered item types in the
	// project's score-ordered queue, served highest score first; an item
	// waiting there takes its new score. It returns how many were queued
	// or rescored.
	EnqueueScored(ctx context.Context, project string, items []ScoredItem) (int, error)
	// Claim hands up to count items of the project to worker (a name
	// like a downloader's: 3-30 of a-z, A-Z, 0-9, - and _). No items left
	// is an empty slice, not an error.
	Claim(ctx context.Context, project, worker string, count int) ([]string, error)
	// Done completes worker's items with its JSON result (nil for none,
	// at most 16 KiB) and returns how many were completed now (repeats
	// count once).
	Done(ctx context.Context, project, worker string, items []string, result json.RawMessage) (int, error)
	// Release gives worker's claims on items back to the queue, to be
	// handed out again; it returns how many were released.
	Release(ctx context.Context, project, worker string, items []string) (int, error)
	// Counts returns the project's queue sizes.
	Counts(ctx context.Context, project string) (ProjectCounts, error)
}

// ProjectCounts are a project's queue sizes.
type ProjectCounts struct {
	// Todo waits to be handed out (every todo queue, Redis and offloaded).
	Todo int64 `json:"todo"`
	// Out is claimed and not done.
	Out int64 `json:"out"`
	// Done is completed (in keep mode, the done set; otherwise the count).
	Done int64 `json:"done"`
}

// ErrNoHostAPI is what Config.Host answers when the host offers none (an
// older host, or a test that gave none).
var ErrNoHostAPI = errors.New("this hoard offers no host API to plugins")
