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
