package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// slowDecode is decodeJSON without the hand path: encoding/json alone.
func slowDecode(body []byte, dst any) error { return decodeWithJSON(body, dst, false) }

var fastBodySeeds = []string{
	`{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`,
	`{"downloader":"tester1","api_version":"2"}`,
	`{"downloader": "tester1", "version": "20240101.01", "item": "item-a", "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc"}}`,
	`{"downloader": "tester1", "version": "1", "item": "a\u0000b", "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc"}}`,
	`{"downloader": 5, "api_version": 2}`, `{"bytes": {"data": 1.5}}`, `{"bytes": {"data": -1}}`, `{"bytes": {"data": 01}}`,
	`{"bytes": {"data": 99999999999999999999}}`, `{"bytes": {"a": 1, "a": 2}}`, `{"bytes": {}}`, `{"bytes": null}`,
	`{} {}`, `{}}`, `{}]`, `[`, ``, ` `, "\v{}", `{}`, ` { } `, `{"Downloader": "x"}`, `{"downloader": "x", "downloader": "y"}`,
	`{"item": "a\u0000\u0000b\u0000"}`, `{"item": "\u0000"}`, `{"item": "a\u000"}`, `{"item": "a\u00000"}`, `{"item": "\u0000\u00e9"}`, "{\"item\": \"\xff\\u0000\"}",
	`{"item": null}`, `{"id": null}`, `{"id": [1, "]", {"a": "}"}]}`, `{"id": {"a": "\"}"}}`, `{"other": {"x": [1,2]}, "item": "z"}`,
	`{"other": tru, "item": "z"}`, `{"downloader": "t\u00e9"}`, "{\"downloader\": \"t\xe9\"}", `{"downloader": "é"}`,
	`{"\u0064ownloader": "x"}`, `{"item": "a", "id": 1e5}`, `{"item": "a",}`, `{"item" "a"}`, `{"item": "a" "b"}`,
}

// FuzzFastWarriorBodies: whatever the hand path reads, encoding/json
// reads the same from the same body; it never accepts what json refuses.
func FuzzFastWarriorBodies(f *testing.F) {
	for _, seed := range fastBodySeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fastReq, slowReq requestBody
		if fastReq.decodeFast(body) {
			if err := slowDecode(body, &slowReq); err != nil {
				t.Fatalf("%q: hand path read a request json refuses: %v", body, err)
			}
			if !reflect.DeepEqual(fastReq, slowReq) {
				t.Fatalf("%q: request %+v by hand, %+v by json", body, fastReq, slowReq)
			}
		} else if fastReq != (requestBody{}) {
			t.Fatalf("%q: a refused request changed the body: %+v", body, fastReq)
		}
		var fastDone, slowDone doneBody
		if fastDone.decodeFast(body) {
			if err := slowDecode(body, &slowDone); err != nil {
				t.Fatalf("%q: hand path read a done json refuses: %v", body, err)
			}
			if !reflect.DeepEqual(fastDone, slowDone) {
				t.Fatalf("%q: done %+v by hand, %+v by json", body, fastDone, slowDone)
			}
		} else if !reflect.DeepEqual(fastDone, doneBody{}) {
			t.Fatalf("%q: a refused done changed the body: %+v", body, fastDone)
		}
	})
}

// TestSeesawBodiesTakeTheHandPath: what seesaw sends every round trip is
// read by hand (else the hand path saves nothing), and what it reads is
// json's.
func TestSeesawBodiesTakeTheHandPath(t *testing.T) {
	var req requestBody
	require.True(t, req.decodeFast([]byte(`{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`)))
	require.Equal(t, requestBody{Downloader: "tester1", APIVersion: "2", Version: "20240101.01"}, req)
	var done doneBody
	body := []byte(`{"downloader": "tester1", "version": "20240101.01", "item": "item-a", "bytes": {"data": 1234, "warc": 0}, "id": {"pipeline_hash": "abc"}}`)
	require.True(t, done.decodeFast(body))
	var want doneBody
	require.NoError(t, slowDecode(body, &want))
	require.Equal(t, want, done)
	require.Equal(t, json.RawMessage(`{"pipeline_hash": "abc"}`), done.ID)
	// The ID is a copy: the request's buffer may be reused.
	copy(body[bytes.Index(body, []byte("abc")):], "xyz")
	require.Equal(t, json.RawMessage(`{"pipeline_hash": "abc"}`), done.ID)
	// A multi done's items, NUL-joined, are read by hand too.
	var multi doneBody
	multiBody := []byte(`{"downloader": "tester1", "item": "a\u0000b\u0000c", "bytes": {"data": 1}}`)
	require.True(t, multi.decodeFast(multiBody))
	require.Equal(t, "a\x00b\x00c", *multi.Item)
	// What the hand path leaves to json still decodes, as json decodes it.
	var escaped doneBody
	require.False(t, escaped.decodeFast([]byte(`{"item": "a\u0001b"}`)))
	require.NoError(t, decodeJSON([]byte(`{"item": "a\u0001b\u0000"}`), &escaped))
	require.Equal(t, "a\x01b\x00", *escaped.Item)
}

// BenchmarkDecodeWarriorBodies: decoding seesaw's request and done bodies,
// as every round trip does.
func BenchmarkDecodeWarriorBodies(b *testing.B) {
	request := []byte(`{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`)
	done := []byte(`{"downloader": "tester1", "version": "20240101.01", "item": "bench/item/000012345", "bytes": {"data": 123456}, "id": {"pipeline_hash": "abc", "python_version": "3.9.2"}}`)
	b.ReportAllocs()
	for b.Loop() {
		var req requestBody
		var d doneBody
		if decodeJSON(request, &req) != nil || decodeJSON(done, &d) != nil {
			b.Fatal("a seesaw body was refused")
		}
	}
}

// BenchmarkDecodeMultiDoneBody: a multi=100 done body, its 100 items
// NUL-joined (\u0000 in JSON), as the load generator and seesaw send it.
func BenchmarkDecodeMultiDoneBody(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("bench/item/%09d", i)
	}
	body, err := json.Marshal(map[string]any{"downloader": "tester1", "version": "20240101.01", "item": strings.Join(names, "\x00"),
		"bytes": map[string]int{"data": 1000}, "id": map[string]string{"pipeline_hash": "bench"}})
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		var d doneBody
		if decodeJSON(body, &d) != nil || strings.Count(*d.Item, "\x00") != 99 {
			b.Fatal("the body was refused or misread")
		}
	}
}
