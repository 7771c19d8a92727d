package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins/pluginhost"
	"github.com/hoardproject/hoard/queues"
)

// readyTimeout bounds /readyz's Redis ping, so a load balancer's probe is
// answered (not ready) even when Redis hangs.
const readyTimeout = 2 * time.Second

// Health answers the two probes: /healthz says the process serves HTTP
// (restart it if not), /readyz says it can do its job now (send it
// traffic if so).
type Health struct {
	Engine  *queues.Engine
	Plugins PluginSource
	// draining is set once the server stops taking traffic (Drain).
	draining atomic.Bool
}

// Readiness is /readyz's answer; Ready is true only when every check is.
type Readiness struct {
	Ready    bool              `json:"ready"`
	Redis    string            `json:"redis"`
	Plugins  map[string]string `json:"plugins,omitempty"`
	Draining bool              `json:"draining"`
}

// Alive answers /healthz: the process runs and its HTTP server answers.
// It checks nothing else, so a Redis outage never gets frontends
// restarted (that is /readyz's business).
func (h *Health) Alive(c *gin.Context) {
	c.String(http.StatusOK, "ok\n")
}

// Ready answers /readyz: 200 when Redis answers a ping, every configured
// plugin runs and the server is not draining; 503 otherwise. The body
// names each check's state either way.
func (h *Health) Ready(c *gin.Context) {
	r := h.check(c.Request.Context())
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	c.JSON(status, r)
}

func (h *Health) check(ctx context.Context) Readiness {
	r := Readiness{Ready: true, Redis: "ok", Draining: h.draining.Load()}
	if r.Draining {
		r.Ready = false
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := h.Engine.Redis().Ping(ctx).Err(); err != nil {
		// Not the error's text: it can carry the Redis address.
		r.Redis, r.Ready = "unreachable", false
	}
	if h.Plugins != nil {
		for _, st := range h.Plugins.Status() {
			if r.Plugins == nil {
				r.Plugins = map[string]string{}
			}
			r.Plugins[st.Name] = string(st.State)
			if st.State != pluginhost.StateRunning {
				r.Ready = false
			}
		}
	}
	return r
}
