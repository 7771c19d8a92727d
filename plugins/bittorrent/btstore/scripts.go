package btstore

import (
	"embed"

	"github.com/hoardproject/hoard/internal/luascript"
)

// files holds the plugin's scripts, one file each, with a header naming
// their KEYS, ARGV and return codes. They live here, beside the key
// builders whose names they receive, and not in the host's lua/
// directory: a plugin imports nothing of the host but the shared helper
// that runs a script.
//
//go:embed lua/*.lua
var files embed.FS

// Script loads lua/<name> with parts (a generated table of result codes,
// the prelude) prepended. A missing script is a build mistake: it
// panics, at package init of the caller.
func Script(name string, parts ...string) *luascript.Script {
	return luascript.Load(files, "lua/"+name, parts...)
}

// Prelude is lua/prelude.lua: the peer-removal and user-state rules the
// swarm's scripts share, prepended to each of them.
func Prelude() string { return luascript.Prelude(files, "lua/prelude.lua") }

// FedRecord is fed_record.lua, the part of the scripts that delete users'
// records on a torrent and return what the feed needs of them.
func FedRecord() string { return luascript.Prelude(files, "lua/fed_record.lua") }
