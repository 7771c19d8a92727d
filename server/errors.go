package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/internal/ratelog"
	"github.com/hoardproject/hoard/queues"
)

// StatusVersionTooOld is the status seesaw understands as "your pipeline
// is out of date" (universal-tracker's 455).
const StatusVersionTooOld = 455

// httpError is an error of the HTTP layer itself (auth, routing).
type httpError struct {
	Status  int
	Code    string
	Message string
}

func (e *httpError) Error() string { return e.Message }

func badRequest(format string, args ...any) error {
	return &queues.Error{Op: "server", Code: queues.CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

// statusOf maps an engine error code to the one HTTP status clients get.
func statusOf(code queues.Code) int {
	switch code {
	case queues.CodeInvalid:
		return http.StatusBadRequest
	case queues.CodeProjectNotFound, queues.CodeNoItem:
		return http.StatusNotFound
	case queues.CodeRateLimited:
		return http.StatusTooManyRequests
	case queues.CodeVersionTooOld:
		return StatusVersionTooOld
	case queues.CodeBlocked:
		return http.StatusForbidden
	case queues.CodeNotHandedOut, queues.CodeNotClaimant, queues.CodeExists, queues.CodeClaimsOut:
		return http.StatusConflict
	case queues.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// renderErrors is the one place errors become responses: handlers call
// c.Error(err) and return, and this middleware writes a JSON body
// {"error": message, "code": name} with the status the error's code maps to.
//
// Every error answered is counted by kind ("code/status", e.g.
// "unavailable/503") on /metrics (hoard_refusals_total); a 5xx is also
// logged, at most once a minute per kind with the count of those not
// logged, so a flood (refused websockets, every request while Redis is
// down) cannot flood the log.
func renderErrors(refusals *ratelog.Log) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if len(c.Errors) == 0 || c.Writer.Written() {
			return
		}
		err := c.Errors.Last().Err
		a := answerError(err)
		if a.retryAfter != "" {
			c.Header("Retry-After", a.retryAfter)
		}
		a.note(c.Request.Context(), refusals, c.Request.Method, loggablePath(c), err)
		c.JSON(a.status, a.body)
	}
}

// errorAnswer is how an error is answered: renderErrors writes it through
// gin, the warrior listener (warriorconn.go) by hand, the same bytes.
type errorAnswer struct {
	status     int
	code       string
	retryAfter string // seconds, for a rate limit; "" for none
	body       gin.H  // {"error": message, "code": name[, "items": …]}
}

// answerError maps err to its answer.
func answerError(err error) errorAnswer {
	status, code, message := http.StatusInternalServerError, "internal", "internal error"
	var qe *queues.Error
	var he *httpError
	retryAfter := ""
	switch {
	case errors.As(err, &he):
		status, code, message = he.Status, he.Code, he.Message
	case errors.As(err, &qe):
		status, code, message = statusOf(qe.Code), qe.Code.String(), qe.Message
		if qe.Code == queues.CodeRateLimited && qe.RetryAfter > 0 {
			retryAfter = strconv.Itoa(int(math.Ceil(qe.RetryAfter.Seconds())))
		}
	}
	body := gin.H{"error": message, "code": code}
	if qe != nil && len(qe.Items) > 0 {
		body["items"] = qe.Items
	}
	return errorAnswer{status: status, code: code, retryAfter: retryAfter, body: body}
}

// note counts the answer by kind, and logs a 5xx (rate-limited per kind).
func (a errorAnswer) note(ctx context.Context, refusals *ratelog.Log, method, path string, err error) {
	if kind := a.code + "/" + strconv.Itoa(a.status); a.status >= 500 {
		refusals.Log(ctx, slog.LevelError, kind, "request failed", "method", method,
			"path", path, "status", a.status, "err", err)
	} else {
		refusals.Count(kind)
	}
}

func asQueuesError(err error, target **queues.Error) bool { return errors.As(err, target) }

// loggablePath is the path to log for a request: the route pattern where
// gin matched one, so a secret in the path (the backfeed URL carries the
// project's secret) never reaches the log; warrior and page paths, routed
// by hand, carry no secrets.
func loggablePath(c *gin.Context) string {
	if route := c.FullPath(); route != "" {
		return route
	}
	return c.Request.URL.Path
}
