package server

import (
	"net/http/pprof"

	"github.com/gin-gonic/gin"
)

// pprofPrefix is where Go's profiles are served. net/http/pprof's index
// links its profiles below exactly this path.
const pprofPrefix = "/debug/pprof"

// registerPprof serves net/http/pprof on a group the admin middleware
// guards (accessRules: admin role only).
func registerPprof(g *gin.RouterGroup) {
	serve := func(c *gin.Context) {
		switch c.Param("profile") {
		case "/cmdline":
			pprof.Cmdline(c.Writer, c.Request)
		case "/profile":
			pprof.Profile(c.Writer, c.Request)
		case "/symbol":
			pprof.Symbol(c.Writer, c.Request)
		case "/trace":
			pprof.Trace(c.Writer, c.Request)
		default:
			// The index, and named profiles (heap, goroutine, …).
			pprof.Index(c.Writer, c.Request)
		}
	}
	g.GET("/*profile", serve)
	g.POST("/*profile", serve)
}
