// Command hoard-bittorrent is hoard's BitTorrent tracker plugin. hoard serve
// launches it (--plugin bittorrent=/path/to/hoard-bittorrent) over
// go-plugin; run by hand it explains that and exits.
package main

import (
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
)

func main() { plugins.Serve(btplugin.New) }
