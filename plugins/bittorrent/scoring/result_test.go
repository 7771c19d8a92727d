package scoring

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/announcer"
)

// hostMaxResult is the host's bound on a done's result (queues.MaxResultBytes;
// the plugin may not import the engine).
const hostMaxResult = 16 << 10

// TestTheLargestResultFitsTheHost: 16 trackers with the longest URLs the
// checks allow, full of '&', each with the longest error of quotes, still
// fit the host's result limit, and read back.
func TestTheLargestResultFitsTheHost(t *testing.T) {
	r := Result{Peers: 1 << 40, New: 1 << 40, Max: 1000}
	for i := range announcer.MaxTrackers {
		url := "http://127.0.0.1:1/" + strings.Repeat("&", announcer.MaxURLLen-20) + string(rune('a'+i))
		_, err := announcer.ParseURL(url)
		require.NoError(t, err)
		r.Trackers = append(r.Trackers, TrackerResult{URL: url, Max: announcer.MaxMaxPeers, Error: strings.Repeat(`"`, maxErrorLen)})
	}
	raw, err := marshalResult(r)
	require.NoError(t, err)
	require.Less(t, len(raw), hostMaxResult)
	back, err := ParseResult(raw)
	require.NoError(t, err)
	require.Equal(t, r, back)
}
