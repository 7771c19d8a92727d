// Package lua holds every Redis script hoard runs, one file each, with a
// header naming its KEYS, ARGV and return codes. prelude.lua is prepended to
// every script so shared helpers are written once.
package lua

import "embed"

// Files holds the scripts.
//
//go:embed *.lua
var Files embed.FS
