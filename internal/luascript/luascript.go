// Package luascript is hoard's one way to load and run a Redis script:
// every script is a file (with its KEYS, ARGV and return codes in its
// header) loaded from an embedded directory with its shared parts
// prepended, and run with EVALSHA (EVAL once after a NOSCRIPT). The queue
// engine, the swarm store and the leases use it; each wraps the errors in
// its own terms.
package luascript

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Load reads name from files and returns it as a script, with parts (a
// generated preamble, a prelude file's text) prepended in order. A script
// that is missing is a build mistake: Load panics, at package init.
func Load(files fs.FS, name string, parts ...string) *redis.Script {
	body, err := fs.ReadFile(files, name)
	if err != nil {
		panic(fmt.Sprintf("lua script %s: %v", name, err))
	}
	return redis.NewScript(strings.Join(append(parts, string(body)), "\n"))
}

// Prelude reads a prelude file (shared helpers) for Load's parts.
func Prelude(files fs.FS, name string) string {
	body, err := fs.ReadFile(files, name)
	if err != nil {
		panic(fmt.Sprintf("lua prelude %s: %v", name, err))
	}
	return string(body)
}

// Run runs the script, sent once (see sentOnce): a timeout or a broken
// connection is the caller's error, never a second run. On a cluster
// go-redis routes it by KEYS[1]; all KEYS of a hoard script share one hash
// tag, so one slot. A nil reply is not an error.
func Run(ctx context.Context, rdb processor, script *redis.Script, keys []string, args ...any) (any, error) {
	reply, err := script.Run(ctx, onceScripter{rdb}, keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return reply, nil
}

// RunList runs a script that returns a non-empty array.
func RunList(ctx context.Context, rdb processor, script *redis.Script, keys []string, args ...any) ([]any, error) {
	reply, err := Run(ctx, rdb, script, keys, args...)
	if err != nil {
		return nil, err
	}
	list, ok := reply.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("script replied %T, want an array", reply)
	}
	return list, nil
}
