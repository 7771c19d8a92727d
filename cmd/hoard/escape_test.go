package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestControlEscaperAtEveryChunkBoundary: however the stream is cut,
// control characters come out as escapes and the rest as it was.
func TestControlEscaperAtEveryChunkBoundary(t *testing.T) {
	in := "plain\tline\nred\x1b[31mx\x07\nc1\u009b2J é\u00a0\xc2\nend\x7f\n"
	want := "plain\tline\nred\\x1b[31mx\\x07\nc1\\u009b2J é\u00a0\xc2\nend\\x7f\n"
	for cut := 0; cut <= len(in); cut++ {
		for _, chunks := range [][]string{{in[:cut], in[cut:]}, {in[:cut], "", in[cut:]}} {
			var out bytes.Buffer
			e := &controlEscaper{w: &out}
			for _, c := range chunks {
				n, err := e.Write([]byte(c))
				require.NoError(t, err)
				require.Equal(t, len(c), n)
			}
			require.NoError(t, e.Close())
			require.Equal(t, want, out.String(), "cut at %d", cut)
			require.Equal(t, 4, e.Escaped)
		}
	}
}
