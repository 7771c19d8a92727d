package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// readBody reads the whole request body, refusing more than limit bytes.
func readBody(c *gin.Context, limit int64) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, badRequest("request body is larger than %d bytes", limit)
	}
	if err != nil {
		return nil, badRequest("could not read the request body: %v", err)
	}
	return body, nil
}

// bindJSON reads the body (at most limit bytes) and decodes it into dst;
// on failure it records the error for renderErrors and returns false.
// Fields dst does not have are ignored: warriors' bodies (seesaw's stats
// dict) carry more than hoard reads.
func bindJSON(c *gin.Context, limit int64, dst any) bool {
	return bind(c, limit, dst, decodeJSON)
}

// bindStrictJSON is bindJSON that refuses a field dst does not have,
// naming it: the admin API's bodies, where a misspelt field ("titel")
// silently ignored would be a change the operator thinks was made.
func bindStrictJSON(c *gin.Context, limit int64, dst any) bool {
	return bind(c, limit, dst, decodeStrictJSON)
}

func bind(c *gin.Context, limit int64, dst any, decode func([]byte, any) error) bool {
	body, err := readBody(c, limit)
	if err == nil {
		err = decode(body, dst)
	}
	if err != nil {
		_ = c.Error(err)
		return false
	}
	return true
}

// decodeJSON decodes one JSON object from body into dst and refuses
// trailing data, so a truncated or concatenated body is an error.
func decodeJSON(body []byte, dst any) error { return decodeBody(body, dst, false) }

// decodeStrictJSON is decodeJSON refusing unknown fields, by name.
func decodeStrictJSON(body []byte, dst any) error { return decodeBody(body, dst, true) }

func decodeBody(body []byte, dst any, strict bool) error {
	// The warrior bodies' everyday shape, read without reflection
	// (warriorbody.go); the rest, and every error, are json's.
	if fast, ok := dst.(fastDecoder); ok && !strict && fast.decodeFast(body) {
		return nil
	}
	return decodeWithJSON(body, dst, strict)
}

// decodeWithJSON is decodeBody by encoding/json alone.
func decodeWithJSON(body []byte, dst any, strict bool) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("empty request body; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(dst); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badRequest("unknown field %s; nothing was changed (check its spelling)", field)
		}
		return badRequest("malformed JSON: %v", err)
	}
	if dec.More() {
		return badRequest("malformed JSON: data after the object")
	}
	return nil
}

// looseString reads a JSON string or number as text: seesaw sends
// api_version as "2" but a hand-written client may send 2.
type looseString string

func (s *looseString) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	// Most values are plain strings (a nickname, a version): read those
	// without a second pass of the JSON decoder, which every warrior
	// request would pay for three times.
	if plain, ok := plainJSONString(b); ok {
		*s = looseString(plain)
		return nil
	}
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		*s = looseString(text)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("want a string or a number")
	}
	*s = looseString(n.String())
	return nil
}

// plainJSONString returns the text of a JSON string with no escapes, no
// control characters and valid UTF-8, whose text is its bytes; ok is false
// for anything else (json.Unmarshal then decides).
func plainJSONString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	inner := b[1 : len(b)-1]
	for _, c := range inner {
		if c < 0x20 || c == '"' || c == '\\' {
			return "", false
		}
	}
	if !utf8.Valid(inner) {
		return "", false
	}
	return string(inner), true
}

// byteCount reads a non-negative integer byte count.
type byteCount int64

func (n *byteCount) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(b), 64)
		if ferr != nil || f != float64(int64(f)) {
			return errors.New("byte counts must be whole numbers")
		}
		v = int64(f)
	}
	if v < 0 {
		return errors.New("byte counts must not be negative")
	}
	*n = byteCount(v)
	return nil
}
