// Package accounts holds the Redis scripts of the operators' accounts and
// API tokens (package accounts), one file each, with a header naming its
// KEYS, ARGV and return codes.
package accounts

import "embed"

// Files holds the scripts.
//
//go:embed *.lua
var Files embed.FS
