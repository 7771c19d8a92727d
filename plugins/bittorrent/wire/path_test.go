package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePath(t *testing.T) {
	cases := []struct {
		path    string
		ep      Endpoint
		passkey string
	}{
		{"/announce", EndpointAnnounce, ""},
		{"/scrape", EndpointScrape, ""},
		{"/announce/", EndpointAnnounce, ""},
		{"/abcDEF0123456789abcdef0123456789/announce", EndpointAnnounce, "abcDEF0123456789abcdef0123456789"},
		{"/pk/scrape", EndpointScrape, "pk"},
		{"/announce/pk-1", EndpointAnnounce, "pk-1"},
		{"/scrape/pk_1", EndpointScrape, "pk_1"},
		{"/", EndpointUnknown, ""},
		{"", EndpointUnknown, ""},
		{"announce", EndpointUnknown, ""},
		{"/announce.php", EndpointUnknown, ""},
		{"/pk/other", EndpointUnknown, ""},
		{"/a/b/announce", EndpointUnknown, ""},
		{"/announce/a/b", EndpointUnknown, ""},
		{"/{pk}/announce", EndpointUnknown, ""},
		{"/announce/{pk}", EndpointUnknown, ""},
		{"//announce", EndpointUnknown, ""},
	}
	for _, tc := range cases {
		ep, pk := ParsePath(tc.path)
		require.Equal(t, tc.ep, ep, tc.path)
		require.Equal(t, tc.passkey, pk, tc.path)
	}
}

func TestParseURLData(t *testing.T) {
	cases := []struct {
		data    string
		ep      Endpoint
		passkey string
		err     error
	}{
		{"/announce", EndpointAnnounce, "", nil},
		{"/pk/announce", EndpointAnnounce, "pk", nil},
		{"/announce/pk", EndpointAnnounce, "pk", nil},
		{"/announce?passkey=pk&x=1", EndpointAnnounce, "pk", nil},
		{"/pk/announce?passkey=pk", EndpointAnnounce, "pk", nil},
		{"/pk/announce?passkey=other", EndpointAnnounce, "", ErrConflictingPasskeys},
		{"/announce?passkey=%7B", EndpointAnnounce, "", ErrBadPasskey},
		{"/announce?passkey=%zz", EndpointAnnounce, "", ErrMalformedQuery},
		{"/nope", EndpointUnknown, "", ErrBadURLData},
	}
	for _, tc := range cases {
		ep, pk, err := ParseURLData(tc.data)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, tc.data)
			continue
		}
		require.NoError(t, err, tc.data)
		require.Equal(t, tc.ep, ep, tc.data)
		require.Equal(t, tc.passkey, pk, tc.data)
	}
}
