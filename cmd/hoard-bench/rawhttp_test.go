package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// readAllRaw reads responses from input until it runs out, as a kept
// connection would.
func readAllRaw(input string) ([]rawResponse, error) {
	br := bufio.NewReaderSize(strings.NewReader(input), 4096)
	var out []rawResponse
	var buf []byte
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return out, nil
		}
		resp, b, err := readRawResponse(br, buf)
		if err != nil {
			return out, err
		}
		resp.body = bytes.Clone(resp.body)
		out = append(out, resp)
		buf = b
	}
}

func TestReadRawResponseReadsWhatHoardAndNetHTTPSend(t *testing.T) {
	// hoard's warrior listener's answers, a kept connection's two calls.
	got, err := readAllRaw("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Mon, 30 Nov 2026 02:41:00 GMT\r\nContent-Length: 26\r\n\r\n{\"item_name\":\"bench/item\"}" +
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Mon, 30 Nov 2026 02:41:00 GMT\r\nContent-Length: 3\r\nConnection: close\r\n\r\nOK\n")
	require.NoError(t, err)
	require.Equal(t, []rawResponse{{status: 200, body: []byte(`{"item_name":"bench/item"}`)}, {status: 200, close: true, body: []byte("OK\n")}}, got)

	// chunked, a 404 without a body, and Connection's tokens in any case.
	got, err = readAllRaw("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n" +
		"HTTP/1.1 404 Not Found\r\ncontent-length:0\r\nConnection: keep-alive, CLOSE\r\n\r\n")
	require.NoError(t, err)
	require.Equal(t, []rawResponse{{status: 200, body: []byte("abc0123456789")}, {status: 404, close: true, body: []byte{}}}, got)
}

func TestReadRawResponseRefusesWhatItCannotReadForSure(t *testing.T) {
	for input, want := range map[string]string{
		"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n":                                   "status line",
		"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n":                                     "not ended by CRLF",
		"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n":                                    "status line",
		"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n":                                  "status line",
		"HTTP/1.1 100 Continue\r\n\r\n":                                                  "unexpected status 100",
		"HTTP/1.1 204 No Content\r\n\r\n":                                                "unexpected status 204",
		"HTTP/1.1 200 OK\r\n\r\n":                                                        "neither Content-Length nor chunked",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nOK":            "more than one Content-Length",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n":                                  "Content-Length",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n":                         "Content-Length",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n":     "both Content-Length and chunked",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n":                    "Transfer-Encoding",
		"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 0\r\n\r\n":         "unexpected Content-Encoding",
		"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n":                    "header line",
		"HTTP/1.1 200 OK\r\n folded\r\nContent-Length: 0\r\n\r\n":                        "header line",
		"HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n":                      "header line",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nOK":                                 "unexpected EOF",
		"HTTP/1.1 200 OK\r\nContent-Len":                                                 "unexpected EOF",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n": "chunk size",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n":    "chunk not ended by CRLF",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n\r\n":         "trailer",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab":                   "unexpected EOF",
	} {
		_, err := readAllRaw(input)
		require.ErrorContains(t, err, want, "%q", input)
	}
	// A head line longer than the reader's buffer.
	_, err := readAllRaw("HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\nContent-Length: 0\r\n\r\n")
	require.ErrorContains(t, err, "line longer than 4096 bytes")
}

// FuzzReadRawResponseAgreesWithNetHTTP: whatever readRawResponse accepts,
// net/http's ReadResponse reads the same way: status, body, whether the
// connection closes, and where the response ends (what a kept connection
// reads next).
func FuzzReadRawResponseAgreesWithNetHTTP(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nDate: Mon, 30 Nov 2026 02:41:00 GMT\r\nContent-Length: 17\r\n\r\n{\"item_name\":\"a\"}HTTP/1.1 200 OK\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nOK\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nrest"))
	f.Add([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: Keep-Alive , close\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 429 \r\nRetry-After: 60\r\nContent-Length: 00\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, input []byte) {
		mineUnder := bytes.NewReader(input)
		mine := bufio.NewReaderSize(mineUnder, 4096)
		got, _, err := readRawResponse(mine, nil)
		if err != nil {
			return
		}
		underlying := bytes.NewReader(input)
		theirs := bufio.NewReaderSize(underlying, 4096)
		resp, err := http.ReadResponse(theirs, &http.Request{Method: http.MethodPost})
		require.NoError(t, err, "accepted %q", input)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err, "accepted %q", input)
		require.Equal(t, resp.StatusCode, got.status, "%q", input)
		require.Equal(t, string(body), string(got.body), "%q", input)
		require.Equal(t, resp.Close, got.close, "%q", input)
		require.Equal(t, theirs.Buffered()+underlying.Len(), mine.Buffered()+mineUnder.Len(), "where %q ends", input)
	})
}

func TestJSONItemName(t *testing.T) {
	for reply, want := range map[string]string{
		`{"item_name":"bench/item/000000001"}`: "bench/item/000000001",
		` { "extra" : [1, {"a": null}, -0.5e+3], "item_name" : "a\u0000b\u00e9\ud83d\ude00\n\"\\\/" } `: "a\x00bé😀\n\"\\/",
		`{"item_name":"first","item_name":"last"}`:                                                      "last",
		`{"ITEM_NAME":"no","item_name":"yes"}`:                                                          "yes",
	} {
		got, err := jsonItemName([]byte(reply), nil)
		require.NoError(t, err, reply)
		require.Equal(t, want, string(got), reply)
	}
	for _, reply := range []string{
		``, `[]`, `{}`, `{"item_name":1}`, `{"item_name":"a"`, `{"item_name":"a"} x`, `{"item_name":"\ud800"}`,
		"{\"item_name\":\"\xff\"}", "{\"item_name\":\"a\tb\"}", `{"x":01,"item_name":"a"}`, `{"x":tru,"item_name":"a"}`,
		`{"x":"\q","item_name":"a"}`, `{"item_name":"a",}`, `{"ITEM_NAME":"a"}`,
	} {
		_, err := jsonItemName([]byte(reply), nil)
		require.Error(t, err, reply)
	}
}

// FuzzJSONItemNameAgreesWithEncodingJSON: a name jsonItemName reads is
// the one encoding/json reads into a map (exact keys, the last wins, as
// Python's dict), and appendPythonJSONString writes it back so that
// encoding/json reads the same name.
func FuzzJSONItemNameAgreesWithEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"item_name":"bench/item/000000001"}`))
	f.Add([]byte(`{"a":{"b":[true,false,null,1.5e-3]},"item_name":"x\u0000y\ud83d\ude00\u007f","item_name":"z"}`))
	f.Add([]byte(`{"item_name":"é\"\\\/\b\f\n\r\t"}`))
	f.Fuzz(func(t *testing.T, reply []byte) {
		got, err := jsonItemName(reply, nil)
		if err != nil {
			return
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(reply, &m), "accepted %q", reply)
		require.Equal(t, m["item_name"], string(got), "%q", reply)
		written := appendPythonJSONString(nil, got)
		for _, c := range written {
			require.True(t, c >= ' ' && c <= '~', "%q: byte %#x outside printable ASCII", written, c)
		}
		var back string
		require.NoError(t, json.Unmarshal(written, &back), "%q", written)
		require.Equal(t, string(got), back)
	})
}

func TestAppendPythonJSONStringIsJSONDumps(t *testing.T) {
	// python3 -c 'import json; print(json.dumps("a\x00b\"\\/\x7fé😀\n\t\x1f"))'
	require.Equal(t, `"a\u0000b\"\\/\u007f\u00e9\ud83d\ude00\n\t\u001f"`,
		string(appendPythonJSONString(nil, []byte("a\x00b\"\\/\x7fé😀\n\t\x1f"))))
	require.True(t, utf8.ValidString("é😀"))
}

func TestLatencyHistogramQuantilesAreWithinABucket(t *testing.T) {
	var h latencyHistogram
	require.Zero(t, h.quantile(0.5))
	var exact latencies
	for i := 10; i <= 10000; i++ {
		d := time.Duration(i*i) * time.Microsecond / 10 // 10 µs to 10 s, skewed
		h.add(d)
		exact.d = append(exact.d, d)
	}
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
		want := exact.quantile(q)
		require.InEpsilon(t, want, h.quantile(q), 1.0/64+0.001, "q %v", q)
	}
	var merged latencyHistogram
	merged.merge(&h)
	merged.merge(&h)
	require.Equal(t, h.quantile(0.99), merged.quantile(0.99))
	// The largest bucket holds anything longer.
	require.Equal(t, len(h.counts)-1, latencyBucket(1000*time.Hour*1000))
	require.Equal(t, 127, latencyBucket(127*time.Microsecond))
	require.Equal(t, 128, latencyBucket(129*time.Microsecond))
}
