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

// Script is a loaded script. Its calls are sent once (see sentOnce):
// unlike go-redis's own Script, whose Run and EvalSha go through the
// client's retries, so a script that had run could run again after a
// timeout. It is the only way hoard's packages hold a script, so no call
// can take the retrying path by mistake.
type Script struct{ script *redis.Script }

// Load reads name from files and returns it as a script, with parts (a
// generated preamble, a prelude file's text) prepended in order. A script
// that is missing is a build mistake: Load panics, at package init.
func Load(files fs.FS, name string, parts ...string) *Script {
	body, err := fs.ReadFile(files, name)
	if err != nil {
		panic(fmt.Sprintf("lua script %s: %v", name, err))
	}
	return &Script{redis.NewScript(strings.Join(append(parts, string(body)), "\n"))}
}

// FromSource makes a script of src, for benchmarks and tests that measure
// against a script of their own (hoard's scripts are files, loaded by
// Load).
func FromSource(src string) *Script { return &Script{redis.NewScript(src)} }

// Hash is the script's SHA-1, as EVALSHA and SCRIPT EXISTS name it.
func (s *Script) Hash() string { return s.script.Hash() }

// Load loads the script (SCRIPT LOAD; on a cluster, go-redis sends it to
// every master). Loading twice is harmless, so this one may be retried.
func (s *Script) Load(ctx context.Context, rdb redis.Scripter) *redis.StringCmd {
	return s.script.Load(ctx, rdb)
}

// Run sends the script once: EVALSHA, then EVAL with its source if Redis
// answered NOSCRIPT (the script did not run then). rdb is a client; on a
// pipeline use EvalSha, whose NOSCRIPT only shows after Exec.
func (s *Script) Run(ctx context.Context, rdb Processor, keys []string, args ...any) *redis.Cmd {
	return s.script.Run(ctx, onceScripter{rdb}, keys, args...)
}

// EvalSha sends (or, on a pipeline, queues) one EVALSHA of the script,
// sent once.
func (s *Script) EvalSha(ctx context.Context, rdb Processor, keys []string, args ...any) *redis.Cmd {
	return onceScripter{rdb}.EvalSha(ctx, s.script.Hash(), keys, args...)
}

// Eval sends (or queues) one EVAL with the script's source, sent once:
// for a call EvalSha's NOSCRIPT answered.
func (s *Script) Eval(ctx context.Context, rdb Processor, keys []string, args ...any) *redis.Cmd {
	return s.script.Eval(ctx, onceScripter{rdb}, keys, args...)
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
func Run(ctx context.Context, rdb Processor, script *Script, keys []string, args ...any) (any, error) {
	reply, err := script.Run(ctx, rdb, keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return reply, nil
}

// RunList runs a script that returns a non-empty array.
func RunList(ctx context.Context, rdb Processor, script *Script, keys []string, args ...any) ([]any, error) {
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
