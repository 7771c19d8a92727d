package queues

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseClaimRecord reads the record format lua/prelude.lua writes,
// "-" meaning none, and refuses anything else.
func TestParseClaimRecord(t *testing.T) {
	c, ok := parseClaimRecord("item:1", "3 1764072000123 alice 10.0.0.1 bob_1,carol - ")
	require.False(t, ok, "a trailing field count other than six is refused")
	c, ok = parseClaimRecord("item:1", "3 1764072000123 alice 10.0.0.1 bob_1,carol users")
	require.True(t, ok)
	require.Equal(t, Claim{Item: "item:1", TimesClaimed: 3, ClaimedAt: time.UnixMilli(1764072000123).UTC(),
		Downloader: "alice", IP: "10.0.0.1", Earlier: []string{"bob_1", "carol"}, Group: "users"}, c)
	c, ok = parseClaimRecord("x", "1 5 alice ::1 - -")
	require.True(t, ok)
	require.Nil(t, c.Earlier)
	require.Empty(t, c.Group)
	for _, bad := range []string{"", "1 2 alice ::1 -", "one 2 alice ::1 - -", "1 two alice ::1 - -"} {
		_, ok := parseClaimRecord("x", bad)
		require.False(t, ok, "%q", bad)
	}
}
