package swarm

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// replyInt reads every text as strconv.ParseInt does (0 for what it
// refuses, clamped past the range), without its error's allocation for
// the common cases.
func TestReplyIntReadsTextAsParseInt(t *testing.T) {
	for _, text := range []string{"", "0", "7", "123456789012345678", "1234567890123456789", "99999999999999999999",
		"-5", "+5", "-", "+", "12.5", "1e3", "abc", " 1", "1 ", "-0", "--1", "9223372036854775807", "-9223372036854775808"} {
		want, _ := strconv.ParseInt(text, 10, 64)
		require.Equal(t, want, replyInt(text), "%q", text)
	}
	require.Equal(t, int64(42), replyInt(int64(42)))
	require.Zero(t, replyInt(nil))
	require.Zero(t, testing.AllocsPerRun(100, func() { replyInt(""); replyInt("12.5"); replyInt("1700000000000") }))
}
