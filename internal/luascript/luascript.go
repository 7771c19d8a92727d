// Package luascript is hoard's one way to load and run a Redis script:
// every script is a file (with its KEYS, ARGV and return codes in its
// header) loaded from an embedded directory with its shared parts
// prepended, and run as a Redis Function (FCALL), or with EVALSHA where the
// server has no functions (Redis before 7.0). The queue engine, the swarm
// store, the accounts and the leases use it; each wraps the errors in its
// own terms.
//
// Why functions: EVALSHA runs the whole chunk on every call, so a script's
// shared parts (the BitTorrent store's 541-line prelude, a generated table
// of result codes) were rebuilt on every announce. A function library runs
// its top level once, at FUNCTION LOAD; an FCALL only calls the function
// it registered, whose upvalues are the parts already built.
//
// Each script is its own library (see Load): the parts go at the library's
// top level, the script's file as the body of the one function it
// registers, function(KEYS, ARGV) ... end. The library and the function
// are both named hoard_<SHA-1 of the EVAL form>, so a changed script is a
// new library and two hoard versions can share a Redis during a rolling
// upgrade, each calling its own.
//
// A script that only reads says so in its header with the line
//
//	-- flags: no-writes
//
// and its function is registered with flags={'no-writes'}: Redis then
// runs it when it is over maxmemory (a function without the flag counts as
// a write and is refused with OOM, exactly when an operator most needs to
// read), and refuses any write it tries, so a wrong flag fails at the
// first call instead of writing. The EVAL form, for servers without
// functions, stays plain (no #! line, which Redis before 7.0 cannot
// parse): a plain EVAL is refused under OOM only at a write, so a script
// that only reads answers there too.
package luascript

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Script is a loaded script. Its calls are sent once (see sentOnce):
// unlike go-redis's own Script, whose Run and EvalSha go through the
// client's retries, so a script that had run could run again after a
// timeout. It is the only way hoard's packages hold a script, so no call
// can take the retrying path by mistake.
type Script struct {
	// src is the EVAL form, the parts and the body as one chunk, for
	// servers without functions; hash is its SHA-1.
	src, hash string
	// name names the function and its library: hoard_ and the EVAL
	// form's SHA-1.
	name string
	// library is the FUNCTION LOAD source.
	library string
	// file is the file Load read, for messages.
	file string
	// readOnly: the header declares no-writes (see the package doc).
	readOnly bool
}

// Load reads name from files and returns it as a script, with parts (a
// generated preamble, a prelude file's text) prepended in order. A script
// that is missing is a build mistake: Load panics, at package init.
//
// One library per script, not one per package or prelude: an FCALL costs
// the same either way (the parts are built at load, not per call), while a
// library of its own keeps each script's name a hash of its own text (a
// change to one script replaces only its library), needs no registry
// filled across package inits, and loads only the scripts a process runs.
// The price is one copy of the parts per library in Redis's memory (the
// largest prelude is about 25 KB of source, held by about a dozen
// scripts).
func Load(files fs.FS, name string, parts ...string) *Script {
	return LoadJoined(files, []string{name}, parts...)
}

// LoadJoined is Load of a script whose body is several files, joined by
// "\n" in order: a first file that may answer the call itself, then the
// script it otherwise goes on to run, unchanged (the files are not copied
// into each other, so the second stays the checked text it is alone). The
// first file's header is the script's, and File names it.
func LoadJoined(files fs.FS, names []string, parts ...string) *Script {
	bodies := make([]string, len(names))
	for i, name := range names {
		body, err := fs.ReadFile(files, name)
		if err != nil {
			panic(fmt.Sprintf("lua script %s: %v", name, err))
		}
		bodies[i] = string(body)
	}
	script := newScript(parts, strings.Join(bodies, "\n"))
	script.file = names[0]
	loaded.Lock()
	loaded.scripts = append(loaded.scripts, script)
	loaded.Unlock()
	return script
}

// loaded is every script Load made, for Loaded.
var loaded struct {
	sync.Mutex
	scripts []*Script
}

// Loaded returns every script Load has made in this process (its
// packages' scripts, made at init), so one test can load all of them as
// functions on a real Redis: a script that breaks a function's limits
// (Lua 5.1's 60 upvalues, no globals) fails there, not in production.
func Loaded() []*Script {
	loaded.Lock()
	defer loaded.Unlock()
	return append([]*Script(nil), loaded.scripts...)
}

// File is the script's file name as Load read it ("" for FromSource).
func (s *Script) File() string { return s.file }

// Library is the script's FUNCTION LOAD source.
func (s *Script) Library() string { return s.library }

// FromSource makes a script of src, for benchmarks and tests that measure
// against a script of their own (hoard's scripts are files, loaded by
// Load).
func FromSource(src string) *Script { return newScript(nil, src) }

func newScript(parts []string, body string) *Script {
	readOnly, err := headerFlags(body)
	if err != nil {
		panic(err.Error())
	}
	src := strings.Join(append(parts[:len(parts):len(parts)], body), "\n")
	sum := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(sum[:])
	name := "hoard_" + hash
	var library strings.Builder
	library.WriteString("#!lua name=" + name + "\n")
	for _, part := range parts {
		library.WriteString(part)
		library.WriteString("\n")
	}
	// The body is the function's: its locals are per call, as a chunk's
	// were; only the parts live across calls (hoard's parts are functions,
	// constants and caches of constants, never a call's state).
	library.WriteString("redis.register_function{function_name='" + name + "', callback=function(KEYS, ARGV)\n")
	library.WriteString(body)
	library.WriteString("\nend")
	if readOnly {
		library.WriteString(", flags={'no-writes'}")
	}
	library.WriteString("}\n")
	return &Script{src: src, hash: hash, name: name, library: library.String(), readOnly: readOnly}
}

// flagsPrefix starts the header line that declares a script's function
// flags.
const flagsPrefix = "-- flags:"

// headerFlags reads the flags line of a script's header (its leading
// comment lines): no-writes is the one flag hoard declares. A line naming
// another flag is a mistake in the file (a typo must not silently leave a
// read-only script refused under OOM), reported at package init.
func headerFlags(body string) (readOnly bool, err error) {
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			if line == "" {
				continue
			}
			break // the header ends at the first line of code
		}
		rest, ok := strings.CutPrefix(line, flagsPrefix)
		if !ok {
			continue
		}
		for _, flag := range strings.Fields(rest) {
			if flag != "no-writes" {
				return false, fmt.Errorf("lua script: header line %q: unknown flag %q (only no-writes is known)", line, flag)
			}
			readOnly = true
		}
	}
	return readOnly, nil
}

// ReadOnly reports whether the script's header declares no-writes, so its
// function runs when Redis is over maxmemory and may not write.
func (s *Script) ReadOnly() bool { return s.readOnly }

// Hash is the script's SHA-1, as EVALSHA and SCRIPT EXISTS name it.
func (s *Script) Hash() string { return s.hash }

// Name is the script's function (and library) name, as FCALL and FUNCTION
// LIST name it.
func (s *Script) Name() string { return s.name }

// Load loads the script where rdb's calls will find it: its library on
// every master (FUNCTION LOAD), or the EVAL form in the script cache
// (SCRIPT LOAD) on a server without functions. Loading twice is harmless,
// so this one may be retried.
func (s *Script) Load(ctx context.Context, rdb Processor) error {
	if !evalOnly(rdb) {
		err := s.loadFunction(ctx, rdb)
		if !noFunctions(err) {
			return err
		}
		markEvalOnly(rdb)
	}
	return forEachMaster(ctx, rdb, func(ctx context.Context, node Processor) error {
		cmd := redis.NewStringCmd(ctx, "script", "load", s.src)
		_ = node.Process(ctx, cmd)
		return cmd.Err()
	})
}

// loadFunction loads the script's library on every master. A library of
// that name is already this library (the name is its content's hash), so
// "already exists" is success: cheaper than REPLACE, which compiles the
// library again, when many callers find it missing at once.
func (s *Script) loadFunction(ctx context.Context, rdb Processor) error {
	return forEachMaster(ctx, rdb, func(ctx context.Context, node Processor) error {
		cmd := redis.NewStringCmd(ctx, "function", "load", s.library)
		_ = node.Process(ctx, cmd)
		if err := cmd.Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
			return err
		}
		return nil
	})
}

// forEachMaster runs fn on every master of a cluster client, or on rdb.
func forEachMaster(ctx context.Context, rdb Processor, fn func(ctx context.Context, node Processor) error) error {
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	}
	return fn(ctx, rdb)
}

// maxLoads bounds how often one call loads its library and sends again:
// a library can go between the load and the resend (Prune in another
// process, a FUNCTION FLUSH), and the call did not run then either, so it
// is sent again; the bound only keeps a server that loses every load from
// holding the caller forever.
const maxLoads = 3

// Run sends the script once: FCALL, then FUNCTION LOAD and FCALL again if
// Redis answered that the function is not loaded (it did not run then;
// at most maxLoads times).
// Against a server without functions: EVALSHA, then EVAL with its source
// after a NOSCRIPT. rdb is a client, not a pipeline (use RunPipelined).
func (s *Script) Run(ctx context.Context, rdb Processor, keys []string, args ...any) *redis.Cmd {
	if !evalOnly(rdb) {
		cmd := send(ctx, rdb, fcallName, s.name, keys, args)
		for range maxLoads {
			if !functionMissing(cmd.Err()) {
				break
			}
			if err := s.loadFunction(ctx, rdb); err != nil {
				return redis.NewCmdResult(nil, fmt.Errorf("luascript: FUNCTION LOAD %s: %w", s.name, err))
			}
			cmd = send(ctx, rdb, fcallName, s.name, keys, args)
		}
		switch err := cmd.Err(); {
		case noFunctions(err):
			markEvalOnly(rdb) // the FCALL did not run: EVALSHA below
		default:
			return cmd
		}
	}
	cmd := send(ctx, rdb, evalShaName, s.hash, keys, args)
	if noScript(cmd.Err()) {
		return send(ctx, rdb, evalName, s.src, keys, args)
	}
	return cmd
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

// IsScriptCall reports whether a command name (as INFO commandstats,
// SLOWLOG or a hook names it, in any case) is a script call: FCALL, or
// EVALSHA and EVAL on a server without functions.
func IsScriptCall(name string) bool {
	switch strings.ToLower(name) {
	case "fcall", "fcall_ro", "evalsha", "eval", "evalsha_ro", "eval_ro":
		return true
	}
	return false
}
