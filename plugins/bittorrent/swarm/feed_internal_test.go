package swarm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFeedRowParsesUserFeedsLayout(t *testing.T) {
	row, ok := parseFeedRow("u7", "3,4000,28000,4000,0,1800000,5400000,1764367200000,1764370800000")
	require.True(t, ok)
	require.Equal(t, storedFeedRow{FeedRow: FeedRow{UserID: "u7", Seq: 3, Uploaded: 4000, Downloaded: 28000, UpCredited: 4000,
		DownCredited: 0, SeedMillis: 1800000, LeechMillis: 5400000, Snatched: 1764367200000}, announced: 1764370800000}, row)
	for _, bad := range []string{"", "3", "3,4000,28000,4000,0,1800000,5400000,0", "3,4000,28000,4000,0,1800000,5400000,0,1,2",
		"3,4000,x,4000,0,1800000,5400000,0,1", "3,4000,-1,4000,0,1800000,5400000,0,1", "3,4000,,4000,0,1800000,5400000,0,1"} {
		_, ok := parseFeedRow("u7", bad)
		require.False(t, ok, bad)
	}
}
