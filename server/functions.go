package server

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/luascript"
)

// FunctionPruner deletes the Redis function libraries of scripts this
// process does not run (luascript.Prune).
type FunctionPruner interface {
	PruneFunctions(ctx context.Context) (luascript.PruneReport, error)
}

// processFunctions prunes every hoard_ library but the ones of the scripts
// this process made (luascript.Loaded): every build's scripts are new
// libraries, and nothing else ever deletes the old ones.
type processFunctions struct{ rdb redis.UniversalClient }

func (p processFunctions) PruneFunctions(ctx context.Context) (luascript.PruneReport, error) {
	return luascript.Prune(ctx, p.rdb, luascript.Loaded())
}

// pruneFunctions serves POST /functions/prune (admins only): deleting a
// library another process calls costs that process one reload at its next
// call, never a lost or repeated call, but it is still a change to the
// whole Redis, so it is logged as one.
func (a *AdminAPI) pruneFunctions(c *gin.Context) {
	if a.Functions == nil {
		_ = c.Error(&httpError{Status: http.StatusServiceUnavailable, Code: "functions_off",
			Message: "this server prunes no function libraries"})
		return
	}
	report, err := a.Functions.PruneFunctions(c.Request.Context())
	if len(report.Deleted) > 0 {
		a.recordChange(c, "", "", "function libraries pruned", "deleted", report.Deleted, "kept", len(report.Kept))
	}
	if err != nil {
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusOK, report)
}
