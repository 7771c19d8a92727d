package wire

import (
	"strings"
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

// endpointPath is the path segment naming ep.
func endpointPath(ep Endpoint) string {
	if ep == EndpointScrape {
		return "scrape"
	}
	return "announce"
}

// passkeyShapes are the URL paths that must parse to (ep, passkey). A
// passkey spelled like an endpoint ("/scrape/announce") is ambiguous in the
// /<passkey>/<endpoint> shape, and ParsePath reads the first segment as the
// endpoint, so that shape is left out for such passkeys.
func passkeyShapes(ep Endpoint, passkey string) []string {
	name := endpointPath(ep)
	if passkey == "" {
		return []string{"/" + name, "/" + name + "/"}
	}
	shapes := []string{"/" + name + "/" + passkey}
	if endpointName(passkey) == EndpointUnknown {
		shapes = append(shapes, "/"+passkey+"/"+name)
	}
	return shapes
}

// FuzzParsePath checks ParsePath never panics, that whatever it accepts is
// exactly one of the documented shapes with a well-formed passkey, and
// that every shape built from a well-formed passkey is accepted.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/announce", "/scrape/", "/pk/announce", "/announce/pk", "/{pk}/scrape",
		"//announce", "/announce/a/b", "abcDEF0123456789abcdef0123456789", "/scrape/announce", "announce"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ep, passkey := ParsePath(s)
		if ep == EndpointUnknown {
			require.Empty(t, passkey)
		} else {
			require.True(t, passkey == "" || ValidPasskey(passkey), "%q", passkey)
			name := endpointPath(ep)
			if passkey == "" {
				require.Contains(t, []string{"/" + name, "/" + name + "/"}, s)
			} else {
				require.Contains(t, []string{"/" + name + "/" + passkey, "/" + passkey + "/" + name}, s)
			}
		}

		if !ValidPasskey(s) {
			return
		}
		for _, ep := range []Endpoint{EndpointAnnounce, EndpointScrape} {
			for _, path := range passkeyShapes(ep, s) {
				gotEP, gotPK := ParsePath(path)
				require.Equal(t, ep, gotEP, path)
				require.Equal(t, s, gotPK, path)
			}
		}
	})
}

// FuzzParseURLData checks ParseURLData never panics, agrees with ParsePath
// on the path, only returns well-formed passkeys, and that the request it
// read, written back in every URL shape and carried through a UDP packet's
// BEP 41 options, reads the same.
func FuzzParseURLData(f *testing.F) {
	for _, s := range []string{"/announce", "/pk/announce", "/announce/pk?passkey=pk", "/scrape?passkey=a%2Db",
		"/pk/announce?passkey=other", "/announce?passkey=%7B", "/announce?passkey=%zz", "/nope", "?", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		ep, passkey, err := ParseURLData(data)

		if len(data) <= maxURLData {
			in := testAnnounceRequest()
			in.URLData = []byte(data)
			var r UDPRequest
			require.NoError(t, ParseUDPRequest(AppendUDPRequest(nil, &in), &r))
			require.Equal(t, data, string(r.URLData), "BEP 41 options carry the URL data unchanged")
			ep2, passkey2, err2 := ParseURLData(string(r.URLData))
			require.Equal(t, ep, ep2)
			require.Equal(t, passkey, passkey2)
			require.Equal(t, err, err2)
		}

		path, _, hasQuery := strings.Cut(data, "?")
		pathEP, pathPK := ParsePath(path)
		if err != nil {
			require.NotEmpty(t, err.Error())
			if pathEP == EndpointUnknown {
				require.ErrorIs(t, err, ErrBadURLData)
			}
			return
		}
		require.Equal(t, pathEP, ep)
		require.NotEqual(t, EndpointUnknown, ep)
		require.True(t, passkey == "" || ValidPasskey(passkey), "%q", passkey)
		if pathPK != "" || !hasQuery {
			require.Equal(t, pathPK, passkey)
		}

		shapes := passkeyShapes(ep, passkey)
		if passkey != "" {
			shapes = append(shapes, "/"+endpointPath(ep)+"?passkey="+string(AppendQueryEscape(nil, passkey)))
		}
		for _, shape := range shapes {
			gotEP, gotPK, err := ParseURLData(shape)
			require.NoError(t, err, shape)
			require.Equal(t, ep, gotEP, shape)
			require.Equal(t, passkey, gotPK, shape)
		}
	})
}
