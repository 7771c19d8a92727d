// Package bittorrent holds the Redis scripts of the BitTorrent swarm store
// (plugins/bittorrent/swarm), one file each, with a header naming its KEYS,
// ARGV and return codes. prelude.lua is prepended to every script so the
// peer-removal and user-state rules are written once.
package bittorrent

import "embed"

// Files holds the scripts.
//
//go:embed *.lua
var Files embed.FS
