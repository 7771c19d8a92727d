package jsonstring

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzAppendIsJSONMarshal: Append writes what json.Marshal writes, for
// any string (escapes, HTML characters, invalid UTF-8), after what the
// slice held.
func FuzzAppendIsJSONMarshal(f *testing.F) {
	for _, s := range []string{"", "bench/item/000000001", "url:https://example.org/?a=1&b=<2>", "a\x00b", `q"uote`, `back\slash`, "<&>", "ünïcödé", "\x00\x1f\x7f", "\xff", "\u2028", " ~"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		got := Append([]byte("x"), s)
		require.Equal(t, "x"+string(want), string(got))
	})
}

// FuzzAppendContentsJoinedIsJSONMarshal: two parts' contents joined by an
// escaped NUL, inside quotes, are what json.Marshal writes for the parts
// joined by a NUL (how the warrior path answers multi=N).
func FuzzAppendContentsJoinedIsJSONMarshal(f *testing.F) {
	for _, s := range []string{"", "bench/item/000000001", "a&b", "\xff", "\xe2\x82", "ü"} {
		f.Add(s, "bench/item/000000002")
		f.Add("\xe2", s)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		want, err := json.Marshal(a + "\x00" + b)
		require.NoError(t, err)
		got := append(AppendContents([]byte(`x"`), a), `\u0000`...)
		got = append(AppendContents(got, b), '"')
		require.Equal(t, "x"+string(want), string(got))
	})
}

// BenchmarkAppendItemName: one item name that needs no escape, as the
// warrior path copies ~200 per multi=100 round trip.
func BenchmarkAppendItemName(b *testing.B) {
	buf := make([]byte, 0, 64)
	for range b.N {
		buf = Append(buf[:0], "bench/item/000000001")
	}
}
