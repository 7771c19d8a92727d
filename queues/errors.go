package queues

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Code says what kind of failure an Error is; the HTTP layer maps each code
// to one status, so handlers never decide statuses themselves.
type Code int

const (
	// CodeInvalid: the input is malformed (bad name, bad JSON, too large).
	CodeInvalid Code = iota + 1
	// CodeProjectNotFound: no project has that slug.
	CodeProjectNotFound
	// CodeNoItem: nothing to hand out to this downloader right now.
	CodeNoItem
	// CodeRateLimited: the request rate limit refused the request.
	CodeRateLimited
	// CodeVersionTooOld: the client's script version is below the minimum.
	CodeVersionTooOld
	// CodeBlocked: the downloader or its IP is blocked.
	CodeBlocked
	// CodeNotHandedOut: a done or release named items that are not out.
	CodeNotHandedOut
	// CodeNotClaimant: a done named items that someone else claimed.
	CodeNotClaimant
	// CodeExists: the thing to create already exists.
	CodeExists
	// CodeUnavailable: a dependency (Redis) failed.
	CodeUnavailable
	// CodeClaimsOut: the change would strand items that warriors hold
	// (deleting a project with claims out, without force).
	CodeClaimsOut
)

func (c Code) String() string {
	switch c {
	case CodeInvalid:
		return "invalid"
	case CodeProjectNotFound:
		return "project_not_found"
	case CodeNoItem:
		return "no_item"
	case CodeRateLimited:
		return "rate_limited"
	case CodeVersionTooOld:
		return "version_too_old"
	case CodeBlocked:
		return "blocked"
	case CodeNotHandedOut:
		return "not_handed_out"
	case CodeNotClaimant:
		return "not_your_claim"
	case CodeExists:
		return "exists"
	case CodeUnavailable:
		return "unavailable"
	case CodeClaimsOut:
		return "claims_out"
	}
	return fmt.Sprintf("code(%d)", int(c))
}

// Error is the engine's one error type. Message is safe to show to clients.
type Error struct {
	Op      string // e.g. "queues.Claim"
	Code    Code
	Message string
	// RetryAfter is set with CodeRateLimited.
	RetryAfter time.Duration
	// Items lists the offending items with CodeNotHandedOut.
	Items []string
	Err   error // the underlying cause, for logs only
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(e.Message)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the Code of err, or 0 when err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func errorf(op string, code Code, format string, args ...any) *Error {
	return &Error{Op: op, Code: code, Message: fmt.Sprintf(format, args...)}
}

func unavailable(op string, err error) *Error {
	return &Error{Op: op, Code: CodeUnavailable, Message: "redis failed", Err: err}
}
