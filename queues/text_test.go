package queues_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

func TestFindControl(t *testing.T) {
	for s, want := range map[string]struct {
		at int
		r  rune
	}{
		"plain": {-1, 0}, "tab\tok": {-1, 0}, "": {-1, 0}, "héllo wörld ✓": {-1, 0}, "\u00a0nbsp": {-1, 0},
		"\x00": {0, 0}, "a\x1b[31m": {1, 0x1b}, "ab\x07": {2, 7}, "x\x7f": {1, 0x7f}, "ab\ncd": {2, '\n'},
		"é\u0085": {2, 0x85}, "\u009b2J": {0, 0x9b}, "\u009f": {0, 0x9f}, "\u00a0\u0080": {2, 0x80},
	} {
		at, r := queues.FindControl(s)
		require.Equal(t, want.at, at, "%q", s)
		require.Equal(t, want.r, r, "%q", s)
		bat, br := queues.FindControl([]byte(s))
		require.Equal(t, at, bat, "%q as bytes", s)
		require.Equal(t, r, br, "%q as bytes", s)
	}
}

func TestValidateNewItem(t *testing.T) {
	require.NoError(t, queues.ValidateNewItem("https://example.com/a\tb"))
	err := queues.ValidateNewItem("user:\x1b]0;title\x07")
	require.ErrorContains(t, err, "U+001B at byte offset 5")
	require.Equal(t, queues.CodeInvalid, queues.CodeOf(err))
	// An item stored before the check can still be finished or released.
	require.NoError(t, queues.ValidateItem("user:\x1b]0;title\x07"))
}

// TestValidateItemRefusesNULAndNewlines wherever they are; tab and other
// controls pass (ValidateNewItem refuses those for new items).
func TestValidateItemRefusesNULAndNewlines(t *testing.T) {
	for _, bad := range []string{"\x00", "\r", "\n", "a\x00", "\nb", "a\rb", "item\r\n"} {
		err := queues.ValidateItem(bad)
		require.ErrorContains(t, err, "contains NUL, CR or LF", "%q", bad)
		require.Equal(t, queues.CodeInvalid, queues.CodeOf(err))
	}
	for _, ok := range []string{"a", "a\tb", "\x01\x0b\x0c\x7f", "é"} {
		require.NoError(t, queues.ValidateItem(ok), "%q", ok)
	}
}

func TestValidateBlockTarget(t *testing.T) {
	for in, want := range map[string]string{
		"alice": "alice", "Bob_the-2nd": "Bob_the-2nd", "12345": "12345", "1.2.3.4": "1.2.3.4",
		"2001:DB8:0::1": "2001:db8::1", "::ffff:10.1.2.3": "10.1.2.3", "::1": "::1",
	} {
		got, err := queues.ValidateBlockTarget(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for in, says := range map[string]string{
		"ab\x00cd": "neither a nickname", "999.1.1.1": "not a valid IP", "1.2.3": "not a valid IP",
		"1.2.3.4.5": "not a valid IP", "fe80::1%eth0": "not a valid IP", "2001:db8::g": "not a valid IP",
		"10.0.0.0/8": "is a range", "2001:db8::/32": "is a range", "ab": "neither a nickname",
		"": "neither a nickname", "a b c": "neither a nickname", "x{y}z": "neither a nickname",
		"a-very-long-nickname-of-31-chars": "neither a nickname", "alice\x1b": "neither a nickname",
	} {
		_, err := queues.ValidateBlockTarget(in)
		require.ErrorContains(t, err, says, "%q", in)
		require.Equal(t, queues.CodeInvalid, queues.CodeOf(err), in)
	}
}
