package http1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzFields are the headers the fuzz test asks the parser to keep: a
// proxy header (the plugin's) and the ones hoard's warrior listener reads.
var fuzzFields = []string{"X-Forwarded-For", "Authorization", "user-agent", "X-Real-IP", "Expect"}

// FuzzParseRequestHead: whatever arrives, the parser neither panics nor
// hangs, and a head it accepts is one net/http's server accepts (so
// nothing malformed gets through) and reads to the same method, path,
// query, version, Host, keep-alive, body length and headers. A head with
// Transfer-Encoding is the caller's to refuse or hand on, so it is only
// read, not compared.
func FuzzParseRequestHead(f *testing.F) {
	for _, s := range SampleHeads {
		f.Add([]byte(s))
	}
	f.Add([]byte("POST /p/request HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nAuthorization: Bearer x\r\nauthorization: y\r\nUser-Agent: a\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.TrimLeft(data, "\r\n")
		var h RequestHead
		_ = ParseRequestHead(data, fuzzFields, &h) // any bytes: no panic
		end, _ := HeadEnd(data, 0)
		if end < 0 {
			return
		}
		head := data[:end]
		if err := ParseRequestHead(head, fuzzFields, &h); err != nil {
			require.NotEmpty(t, err.Reason)
			require.GreaterOrEqual(t, err.Status, 400)
			return
		}
		if h.Chunked {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
		require.NoError(t, err, "accepted what net/http refuses: %q", head)
		// The server's own checks after ReadRequest, on the headers as
		// read before ReadRequest moves Host out of them.
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
		_, err = tp.ReadLine()
		require.NoError(t, err)
		mime, err := tp.ReadMIMEHeader()
		require.NoError(t, err)
		if req.ProtoAtLeast(1, 1) {
			require.Len(t, mime["Host"], 1, "%q", head)
		}
		for name, values := range req.Header {
			for _, c := range []byte(name) {
				require.True(t, TokenByte(c), "header name %q", name)
			}
			for _, v := range values {
				require.NotContains(t, v, "\x00")
			}
		}
		require.Equal(t, req.Method, h.Method)
		require.Equal(t, req.URL.Path, h.Path, "%q", head)
		require.Equal(t, req.URL.RawQuery, h.RawQuery, "%q", head)
		require.Equal(t, 1, req.ProtoMajor)
		require.Equal(t, req.ProtoMinor, h.Minor)
		require.Equal(t, req.Close, h.Close, "%q", head)
		if strings.HasPrefix(req.RequestURI, "/") {
			require.Equal(t, req.Host, h.Host)
		}
		for i, name := range fuzzFields {
			values := mime.Values(name)
			require.Equal(t, len(values), h.Fields[i].Lines, "%s in %q", name, head)
			if len(values) > 0 {
				require.Equal(t, values[0], h.Fields[i].First, "%s in %q", name, head)
				require.Equal(t, values[len(values)-1], h.Fields[i].Last, "%s in %q", name, head)
			}
		}
		gzipOK := false
		for _, v := range req.Header.Values("Accept-Encoding") {
			gzipOK = gzipOK || AcceptsGzip(v)
		}
		require.Equal(t, gzipOK, h.AcceptGzip)
		require.Equal(t, req.ContentLength, max(h.ContentLength, 0), "%q", head)
	})
}

// TestParseRequestHeadAllocatesNothing: a typical announce's head (origin
// form, no percent-encoding in the path) is read without allocating.
func TestParseRequestHeadAllocatesNothing(t *testing.T) {
	head := []byte(SampleHeads[0])
	fields := []string{"X-Forwarded-For"}
	var h RequestHead
	allocs := testing.AllocsPerRun(100, func() {
		if err := ParseRequestHead(head, fields, &h); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, "/announce", h.Path)
	require.True(t, h.Close)
	require.True(t, h.AcceptGzip)
	require.Equal(t, int64(-1), h.ContentLength)
}

// TestParseRequestHeadKeepsAskedFieldsInOrder: each asked-for header's
// first and last values and its line count, in the order asked.
func TestParseRequestHeadKeepsAskedFieldsInOrder(t *testing.T) {
	head := []byte("POST /p/done HTTP/1.1\r\nHost: h\r\nUser-Agent: one\r\nX-A: 1\r\nuser-agent: two\r\nContent-Length: 5\r\n\r\n")
	var h RequestHead
	require.Nil(t, ParseRequestHead(head, []string{"X-Absent", "User-Agent", "x-a"}, &h))
	require.Equal(t, Field{}, h.Fields[0])
	require.Equal(t, Field{First: "one", Last: "two", Lines: 2}, h.Fields[1])
	require.Equal(t, Field{First: "1", Last: "1", Lines: 1}, h.Fields[2])
	require.Equal(t, int64(5), h.ContentLength)
	require.Equal(t, "POST", h.Method)
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"gzip": true, "deflate, gzip;q=0.8": true, "GZIP": true, "br;q=1.0, gzip ; q=0.5": true,
		"": false, "identity": false, "gzip;q=0": false, "gzip; q=0.000": false, "x-gzip": false,
	} {
		require.Equal(t, want, AcceptsGzip(header), "%q", header)
	}
}

// FuzzAcceptsGzip: Accept-Encoding comes from the network; whatever it
// holds, the reading never panics and says gzip only when gzip is named.
func FuzzAcceptsGzip(f *testing.F) {
	for _, seed := range []string{"gzip", "gzip;q=0", "a,b;c=d,,gzip", ";;;", "gzip;q=0.5,identity"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		if AcceptsGzip(header) && !strings.Contains(strings.ToLower(header), "gzip") {
			t.Fatalf("%q: gzip accepted but not named", header)
		}
	})
}
