// Command hoard-example is the example plugin as a binary, for the host's
// tests.
package main

import (
	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/internal/exampleplugin"
)

func main() { plugins.Serve(exampleplugin.New) }
