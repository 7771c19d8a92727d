package server

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Warrior bodies are decoded by hand when they have seesaw's everyday
// shape, and by encoding/json otherwise. Decoding every request and done
// by reflection was 7-8% of hoard's CPU per round trip (docs/warrior-path.md).
//
// The hand path takes only what it can read exactly as encoding/json
// would: one object; keys without escapes, in ASCII, each at most once,
// named exactly as the struct's tags (json also matches "Downloader", so a
// key that matches a field only ignoring case goes to json); string values
// with no escapes (plainJSONString), but for a done's item, whose only
// escape may be \u0000 (nulJoinedString); byte counts as plain non-negative
// integers; nothing but white space after the object. Anything else, and
// every error, is left to encoding/json (decodeBody), so the errors and
// the odd cases (escaped names, numbers as strings, duplicate keys) are
// json's, unchanged. FuzzFastWarriorBodies holds the two to the same
// result.

// fastDecoder is a body that can try the hand path first. decodeFast
// returns false, leaving the receiver unchanged, for anything it does not
// read exactly as encoding/json would.
type fastDecoder interface {
	decodeFast(body []byte) bool
}

func (r *requestBody) decodeFast(body []byte) bool {
	var got requestBody
	var seen uint8
	ok := scanObject(body, func(key, value []byte) bool {
		var dst *looseString
		var bit uint8
		switch string(key) {
		case "downloader":
			dst, bit = &got.Downloader, 1
		case "api_version":
			dst, bit = &got.APIVersion, 2
		case "version":
			dst, bit = &got.Version, 4
		default:
			return !foldsTo(key, "downloader", "api_version", "version") && json.Valid(value)
		}
		s, plain := plainJSONString(value)
		if !plain || seen&bit != 0 {
			return false
		}
		seen |= bit
		*dst = looseString(s)
		return true
	})
	if ok {
		*r = got
	}
	return ok
}

func (d *doneBody) decodeFast(body []byte) bool {
	var got doneBody
	var seen uint8
	ok := scanObject(body, func(key, value []byte) bool {
		var bit uint8
		var text *looseString // the field a plain string value goes to
		switch string(key) {
		case "downloader":
			bit, text = 1, &got.Downloader
		case "version":
			bit, text = 2, &got.Version
		case "item":
			bit = 4
		case "bytes":
			bit = 8
		case "id":
			bit = 16
		default:
			return !foldsTo(key, "downloader", "version", "item", "bytes", "id") && json.Valid(value)
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case 8:
			counts, ok := plainByteCounts(value)
			got.Bytes = counts
			return ok
		case 16:
			got.ID = append(json.RawMessage(nil), value...)
			return json.Valid(value)
		}
		if text != nil {
			s, plain := plainJSONString(value)
			*text = looseString(s)
			return plain
		}
		s, plain := nulJoinedString(value)
		got.Item = &s
		return plain
	})
	if ok {
		*d = got
	}
	return ok
}

// foldsTo reports whether key matches one of names ignoring ASCII case
// (encoding/json would decode it into that field). Keys here are ASCII.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if len(key) == len(n) && strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}

// plainByteCounts reads {"group": 123, ...} whose keys are plain ASCII,
// each once, and whose values are plain non-negative integers that fit an
// int64; ok is false for anything else.
func plainByteCounts(value []byte) (map[string]byteCount, bool) {
	counts := map[string]byteCount{}
	ok := scanObject(value, func(key, raw []byte) bool {
		if _, dup := counts[string(key)]; dup || !plainCount(raw) {
			return false
		}
		n, err := strconv.ParseInt(string(raw), 10, 64) // no copy: the conversion does not escape
		if err != nil {
			return false
		}
		counts[string(key)] = byteCount(n)
		return true
	})
	return counts, ok
}

// plainCount: 0, or digits not starting with 0.
func plainCount(raw []byte) bool {
	if len(raw) == 0 || (raw[0] == '0' && len(raw) > 1) {
		return false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// scanObject walks one JSON object filling the whole of data (white space
// around it allowed), calling pair for each key and its value's bytes. It
// returns false if data is not such an object as far as it can tell, if a
// key has an escape or a byte outside ASCII, or if pair returns false. It
// does not check values: pair does (plainJSONString, json.Valid), so a
// value the walk delimits wrongly is refused there.
func scanObject(data []byte, pair func(key, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(data) && data[end] != '"' {
			if c := data[end]; c == '\\' || c < 0x20 || c >= 0x80 {
				return false
			}
			end++
		}
		if end >= len(data) {
			return false
		}
		key := data[i+1 : end]
		i = skipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		valueEnd, ok := valueEnd(data, i)
		if !ok || !pair(key, data[i:valueEnd]) {
			return false
		}
		i = skipSpace(data, valueEnd)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// valueEnd finds where the JSON value starting at data[i] ends: the
// closing quote of a string, the bracket that closes an object or array
// (strings inside skipped), or the first delimiter after a number or
// literal. It does not validate what it skips.
func valueEnd(data []byte, i int) (int, bool) {
	if i >= len(data) {
		return 0, false
	}
	depth := 0
	for j := i; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			j++
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(data) {
				return 0, false
			}
			if depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j, j > i
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j, j > i
			}
		}
	}
	return len(data), depth == 0
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// nulJoinedString is plainJSONString for a done's item, which may also
// hold \u0000: a multi claim's items come back NUL-joined, and JSON writes
// NUL as that escape. Any other escape is json's to read.
func nulJoinedString(b []byte) (string, bool) {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return "", false
	}
	inner := b[1 : len(b)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return plainJSONString(b)
	}
	text := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; {
		case c == '\\':
			if !bytes.HasPrefix(inner[i:], nulEscape) {
				return "", false
			}
			text = append(text, 0)
			i += len(nulEscape) - 1
		case c < 0x20 || c == '"':
			return "", false
		default:
			text = append(text, c)
		}
	}
	if !utf8.Valid(text) {
		return "", false
	}
	return string(text), true
}

var nulEscape = []byte(`\u0000`)
