// Package jsonstring writes a Go string as a JSON string into a byte
// slice, byte for byte as encoding/json writes it, without an allocation
// for the strings the warrior path nearly always carries.
package jsonstring

import "encoding/json"

// Append appends s as a JSON string, as json.Marshal writes it. A string
// of printable ASCII that json.Marshal copies as it is (no quote,
// backslash or HTML character to escape), as item names usually are, is
// copied without an allocation; any other goes through json.Marshal.
func Append(b []byte, s string) []byte {
	b = append(b, '"')
	b = AppendContents(b, s)
	return append(b, '"')
}

// AppendContents appends s as the inside of a JSON string, as json.Marshal
// writes it, without the quotes: the parts of a longer string, such as
// names joined by an escaped separator, each copied as Append copies a
// whole string. json.Marshal escapes byte by byte (a character at a time),
// so the parts' contents, joined, are the joined string's.
func AppendContents(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] {
			quoted, _ := json.Marshal(s)
			return append(b, quoted[1:len(quoted)-1]...)
		}
	}
	return append(b, s...)
}

// escaped marks the bytes json.Marshal does not copy as they are: controls,
// DEL and every non-ASCII byte (escaped, or checked as UTF-8), the quote,
// the backslash and the HTML characters. One look-up per byte, where seven
// comparisons were: a multi=100 round trip copies ~200 names.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&'
	}
	return t
}()
