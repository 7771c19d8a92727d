package swarm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFeedRowParsesUserFeedsLayout(t *testing.T) {
	const text = "3,4000,28000,4000,0,1800000,5400000,1764367200000,1764370800000"
	want := storedFeedRow{FeedRow: FeedRow{UserID: "u7", Seq: 3, Uploaded: 4000, Downloaded: 28000, UpCredited: 4000,
		DownCredited: 0, SeedMillis: 1800000, LeechMillis: 5400000, Snatched: 1764367200000}, announced: 1764370800000}
	row, legacy, ok := parseFeedRow("u7:3", text)
	require.True(t, ok)
	require.False(t, legacy)
	require.Equal(t, want, row)
	// An earlier build's row, under the user id alone.
	row, legacy, ok = parseFeedRow("u7", text)
	require.True(t, ok)
	require.True(t, legacy)
	require.Equal(t, want, row)
	for _, bad := range []string{"", "3", "3,4000,28000,4000,0,1800000,5400000,0", "3,4000,28000,4000,0,1800000,5400000,0,1,2",
		"3,4000,x,4000,0,1800000,5400000,0,1", "3,4000,-1,4000,0,1800000,5400000,0,1", "3,4000,,4000,0,1800000,5400000,0,1"} {
		_, _, ok := parseFeedRow("u7:3", bad)
		require.False(t, ok, bad)
	}
	// A field whose seq is not its row's is not fed: only user_feed
	// writes rows, so it is damage.
	_, _, ok = parseFeedRow("u7:4", text)
	require.False(t, ok)
}
