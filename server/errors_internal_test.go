package server

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/ratelog"
)

// TestFailedBackfeedLogNamesTheRouteNotTheSecret: the backfeed URL carries
// the project's secret, so a 5xx log line must show the route pattern.
func TestFailedBackfeedLogNamesTheRouteNotTheSecret(t *testing.T) {
	gin.SetMode(gin.TestMode)
	var logs bytes.Buffer
	router := gin.New()
	// An interval of a nanosecond on the system clock: every failure is
	// logged, as the test looks at each line.
	router.Use(renderErrors(ratelog.New(ratelog.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Interval: time.Nanosecond})))
	router.POST("/backfeed/legacy/:key", func(c *gin.Context) { _ = c.Error(errors.New("redis is down")) })
	router.NoRoute(func(c *gin.Context) { _ = c.Error(errors.New("redis is down")) })

	rec := httptest.NewRecorder()
	router.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/backfeed/legacy/proj-TopSecret_123", nil))
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.Contains(t, logs.String(), "path=/backfeed/legacy/:key")
	require.NotContains(t, logs.String(), "TopSecret_123")

	logs.Reset()
	router.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/proj/multi=5//request", nil))
	require.Contains(t, logs.String(), `path="/proj/multi=5//request"`, "hand-routed warrior paths are logged as sent")
}
