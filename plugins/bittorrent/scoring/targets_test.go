package scoring_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/netguard"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
)

// TestTrackersOnLoopbackAndLinkLocalAreRefused: without the operator's
// allowance, a tracker whose host is a loopback or link-local address
// (or localhost) is refused when registered, naming it, and Redis does
// not change; a tracker that reaches such an address by name (registered
// while allowed here, as a rebound name would be) is refused at the
// announce, the tracker is never asked, and the round records the
// refusal as the tracker's error.
func TestTrackersOnLoopbackAndLinkLocalAreRefused(t *testing.T) {
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked++
		_, _ = w.Write([]byte("d8:intervali60e5:peers0:e"))
	}))
	defer srv.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer udp.Close()
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		_, policy, err := scoring.ParseSettings(nil, false)
		require.NoError(t, err)
		strict := scoring.New(b.Client, policy, nil, quiet)
		f := newFixture(t, b, false, `{"tracker_timeout":"300ms","tracker_retries":-1}`)
		hash := f.registered("inside")
		before, err := redistest.Snapshot(ctx, b.Client)
		require.NoError(t, err)
		for url, says := range map[string]string{
			"udp://127.0.0.1:6969/announce":             "127.0.0.1 is loopback",
			"http://127.0.0.1:80/announce":              "127.0.0.1 is loopback",
			"udp://[::1]:6969/announce":                 "::1 is loopback",
			"http://169.254.169.254/latest/meta-data/x": "169.254.169.254 is link-local",
			"udp://[fe80::1]:6969/announce":             "fe80::1 is link-local",
			"http://localhost:8080/announce":            "is loopback",
			"http://192.168.0.10/announce":              "is private",
			"udp://100.64.1.1:6969/announce":            "carrier-grade NAT",
			"udp://[::ffff:127.0.0.1]:6969/announce":    "127.0.0.1 is loopback",
		} {
			_, _, err := strict.SetTrackers(ctx, hash, []scoring.Tracker{{URL: "udp://tracker.example:1/announce"}, {URL: url}})
			require.ErrorIs(t, err, scoring.ErrInvalid, url)
			require.ErrorContains(t, err, says, url)
			require.ErrorContains(t, err, "allow_private_targets", url)
		}
		after, err := redistest.Snapshot(ctx, b.Client)
		require.NoError(t, err)
		require.Equal(t, before, after, "refused lists changed nothing")

		// Registered through the allowing fixture, announced by a strict
		// scorer: refused on the address dialled.
		f.setTrackers(hash, scoring.Tracker{URL: srv.URL + "/announce"}, scoring.Tracker{URL: "udp://" + udp.LocalAddr().String() + "/announce"})
		raw, err := strict.Process(ctx, f.item(hash, 1))
		require.NoError(t, err)
		r, err := scoring.ParseResult(raw)
		require.NoError(t, err)
		require.Len(t, r.Trackers, 2)
		for _, tr := range r.Trackers {
			require.Contains(t, tr.Error, "is loopback", tr.URL)
			require.Zero(t, tr.Peers)
		}
		require.Zero(t, asked, "the HTTP tracker was never asked")
	})
}

func TestTargetSettingsAreChecked(t *testing.T) {
	_, p, err := scoring.ParseSettings([]byte(`{"allowed_targets":["10.0.0.0/8","192.168.1.1"]}`), false)
	require.NoError(t, err)
	require.Len(t, p.Targets.Allow, 2)
	_, p, err = scoring.ParseSettings([]byte(`{"allow_private_targets":true}`), false)
	require.NoError(t, err)
	require.Equal(t, netguard.Policy{AllowPrivate: true, Allow: []netip.Prefix{}}, p.Targets)
	_, _, err = scoring.ParseSettings([]byte(`{"allowed_targets":["10.0.0.0/8","ten"]}`), false)
	require.ErrorContains(t, err, `allowed target 1 ("ten")`)
}
