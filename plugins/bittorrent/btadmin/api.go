package btadmin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/plugins"
)

// API is the plugin's whole HTTP API, served through the plugin contract
// (HandleRequest): the admin calls for plugins.RoleAdmin, and for
// plugins.RoleScoped what the caller's Scopes open; the tracker page's
// data (plugins.PagePath) for plugins.RolePublic. The host has
// authenticated the caller and checked its scopes before a call gets
// here.
type API struct {
	admin  http.Handler
	public http.Handler
}

// NewAPI builds the API over its parts; a nil part answers its calls
// with 503 (Admin's fields, MetricsAdmin's Store) or serves no scores or
// metrics (TrackerViews).
func NewAPI(admin *Admin, metrics *MetricsAdmin, views *TrackerViews, logger *slog.Logger) *API {
	if logger == nil {
		logger = slog.Default()
	}
	gin.SetMode(gin.ReleaseMode)
	adminRouter := gin.New()
	adminRouter.Use(gin.Recovery(), renderErrors(logger), withLogger(logger))
	admin.register(&adminRouter.RouterGroup)
	metrics.register(&adminRouter.RouterGroup)
	publicRouter := gin.New()
	publicRouter.Use(gin.Recovery(), renderErrors(logger))
	views.register(publicRouter)
	return &API{admin: adminRouter, public: publicRouter}
}

// HandleRequest serves one forwarded call (plugins.Plugin's
// HandleRequest). A call with another role, or to no route, answers 404.
func (a *API) HandleRequest(ctx context.Context, req plugins.Request) (plugins.Response, error) {
	var handler http.Handler
	switch req.Role {
	case plugins.RoleAdmin:
		handler = a.admin
	case plugins.RoleScoped:
		// The host let the call through for one of the caller's scopes;
		// checked again here, so a host that forwards too much cannot
		// widen a scope (defence in depth).
		if !req.Permitted(Scopes) {
			return plugins.ForbiddenResponse(req), nil
		}
		handler = a.admin
	case plugins.RolePublic:
		handler = a.public
	default:
		return plugins.NotFoundResponse(req), nil
	}
	target := &url.URL{Path: "/"}
	if req.Path != "" {
		parsed, err := url.Parse(req.Path)
		if err != nil || parsed.Path == "" || parsed.Path[0] != '/' {
			return plugins.NotFoundResponse(req), nil
		}
		target = &url.URL{Path: parsed.Path, RawPath: parsed.RawPath}
	}
	target.RawQuery = req.Query
	hr, err := http.NewRequestWithContext(ctx, req.Method, target.String(), bytes.NewReader(req.Body))
	if err != nil {
		return plugins.NotFoundResponse(req), nil
	}
	for name, values := range req.Header {
		hr.Header[name] = values
	}
	hr.ContentLength = int64(len(req.Body))
	call := &call{actor: req.Actor}
	hr = hr.WithContext(context.WithValue(ctx, callKey{}, call))
	w := &recorder{header: http.Header{}}
	handler.ServeHTTP(w, hr)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return plugins.Response{Status: w.status, Header: w.header, Body: w.body.Bytes(), Changes: call.changes}, nil
}

// recorder is the http.ResponseWriter a forwarded call is answered into.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(p)
}

// call is what one forwarded call carries besides the HTTP request: who
// makes it, and the changes it made, for the host's admin log.
type call struct {
	actor   string
	changes []plugins.Change
}

type callKey struct{}

type loggerKey struct{}

func withLogger(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Set(loggerKey{}, logger)
		c.Next()
	}
}

// logChange records a change: in the plugin's log, with who made it, and
// in the answer's Changes, which the host writes to its admin log. attrs
// are key-value pairs, as for slog; secrets must be redacted before.
func logChange(c *gin.Context, what string, attrs ...any) {
	cl, _ := c.Request.Context().Value(callKey{}).(*call)
	value, _ := c.Get(loggerKey{})
	logger, _ := value.(*slog.Logger)
	if logger == nil {
		logger = slog.Default()
	}
	actor := ""
	if cl != nil {
		actor = cl.actor
	}
	logger.InfoContext(c.Request.Context(), "admin change: "+what, append([]any{"by", actor}, attrs...)...)
	if cl == nil {
		return
	}
	details := map[string]any{}
	for i := 0; i+1 < len(attrs); i += 2 {
		if k, ok := attrs[i].(string); ok {
			details[k] = attrs[i+1]
		}
	}
	raw, _ := json.Marshal(details)
	cl.changes = append(cl.changes, plugins.Change{What: what, Details: raw})
}

// apiError is an error answered with its status, code and message, in
// the error format of hoard's own API: {"error": message, "code": code}.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func newAPIError(status int, code, message string) error {
	return &apiError{Status: status, Code: code, Message: message}
}

// badRequest is a 400 with code "invalid", as hoard's API answers a bad
// argument.
func badRequest(format string, args ...any) error {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid", Message: fmt.Sprintf(format, args...)}
}

// renderErrors is the one place errors become answers: handlers call
// c.Error(err) and return. Anything but an apiError is a 500 whose cause
// stays in the plugin's log.
func renderErrors(logger *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if len(c.Errors) == 0 || c.Writer.Written() {
			return
		}
		err := c.Errors.Last().Err
		status, code, message := http.StatusInternalServerError, "internal", "internal error"
		var ae *apiError
		if errors.As(err, &ae) {
			status, code, message = ae.Status, ae.Code, ae.Message
		}
		if status >= 500 {
			logger.ErrorContext(c.Request.Context(), "admin call failed", "method", c.Request.Method,
				"route", c.FullPath(), "status", status, "err", err)
		}
		c.JSON(status, gin.H{"error": message, "code": code})
	}
}

// maxBodyBytes bounds a body; the host forwards at most
// plugins.MaxRequestBody anyway.
const maxBodyBytes = plugins.MaxRequestBody

// decode reads the JSON body into dst, refusing unknown fields, trailing
// data and bodies over maxBodyBytes; on failure it has recorded the error
// and returns false.
func decode(c *gin.Context, dst any) bool {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(http.MaxBytesReader(nil, c.Request.Body, maxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		err = badRequest("request body is larger than %d bytes", maxBodyBytes)
	case err != nil:
		err = badRequest("could not read the request body: %v", err)
	case n == 0 || len(bytes.TrimSpace(buf.Bytes())) == 0:
		err = badRequest("empty request body; want a JSON object")
	default:
		dec := json.NewDecoder(&buf)
		dec.UseNumber()
		dec.DisallowUnknownFields()
		if derr := dec.Decode(dst); derr != nil {
			err = badRequest("malformed JSON: %v", derr)
		} else if dec.More() {
			err = badRequest("malformed JSON: data after the object")
		}
	}
	if err != nil {
		_ = c.Error(err)
		return false
	}
	return true
}

// LooseString is a JSON string that also accepts a number (an id sent as
// 12 or "12").
type LooseString string

func (s *LooseString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		*s = LooseString(text)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("want a string or a number")
	}
	*s = LooseString(n.String())
	return nil
}
