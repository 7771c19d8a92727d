package outbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a webhook request's signature:
//
//	X-Hoard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>
//
// where the HMAC is keyed with the webhook secret and computed over the
// bytes "<t>.<body>": the timestamp as written in the header, a dot, and
// the request body exactly as received. A receiver recomputes it, compares
// in constant time, and refuses a timestamp too far from its own clock
// (VerifySignature: 5 minutes), so a captured request cannot be replayed
// later. Events carry idempotency keys, so a replay inside the tolerance
// changes nothing either.
const SignatureHeader = "X-Hoard-Signature"

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock.
const DefaultTolerance = 5 * time.Minute

// ErrSignature is every verification failure.
var ErrSignature = errors.New("bad webhook signature")

// Sign returns the X-Hoard-Signature value for body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// maxSignatureHeader bounds the header a receiver parses.
const maxSignatureHeader = 1024

// VerifySignature checks an X-Hoard-Signature header against body, for
// receivers written in Go (and hoard's own tests): the header must parse,
// its timestamp be within tolerance of now, and one of its v1 signatures
// match. Unknown fields are ignored, so a later scheme can be added
// beside v1.
func VerifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(header) > maxSignatureHeader {
		return fmt.Errorf("%w: header longer than %d bytes", ErrSignature, maxSignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for _, field := range strings.Split(header, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return fmt.Errorf("%w: field %q is not name=value", ErrSignature, field)
		}
		switch name {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: two timestamps", ErrSignature)
			}
			ts = value
		case "v1":
			sig, err := hex.DecodeString(value)
			if err != nil || len(sig) != sha256.Size {
				return fmt.Errorf("%w: v1 is not %d hex bytes", ErrSignature, sha256.Size)
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" {
		return fmt.Errorf("%w: no t= timestamp", ErrSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec < 0 || strings.HasPrefix(ts, "+") {
		return fmt.Errorf("%w: t=%q is not unix seconds", ErrSignature, ts)
	}
	if len(sigs) == 0 {
		return fmt.Errorf("%w: no v1= signature", ErrSignature)
	}
	if skew := now.Sub(time.Unix(sec, 0)); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: timestamp %s is %s away from now (tolerance %s)", ErrSignature, ts, skew.Round(time.Second), tolerance)
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrSignature)
}
