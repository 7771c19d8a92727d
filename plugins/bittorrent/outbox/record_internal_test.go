package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppendRecordIsWhatJSONMarshalWrites: the stored record of an event
// is byte for byte json.Marshal's of its record (compacted body, HTML
// escapes and all), and an event Validate refuses is refused with the
// same error.
func TestAppendRecordIsWhatJSONMarshalWrites(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 50, 1, 234_567_000, time.UTC)
	bodies := []string{"", `{}`, `{"a": 1,  "b" : [1, 2 ,3]}`, " \n\t[ true , null ]\n", `"<b>&amp;</b>"`,
		`{"x":"line` + "\u2028" + `sep` + "\u2029" + `"}`, `{"k":"caf\u00e9 \u00e9"}`, `{"deep":{"er":[{"st":"q\"uote\\"}]}}`}
	keys := []string{"k1", "transfers:5:0011223344556677", "a<b>&c", "caf\u00e9", "sep\u2028"}
	for _, body := range bodies {
		for _, key := range keys {
			e := Event{Key: key, Kind: "k<ind>", Body: json.RawMessage(body)}
			raw := e.Body
			if len(raw) == 0 {
				raw = json.RawMessage("null")
			}
			want, err := json.Marshal(record{Key: e.Key, Kind: e.Kind, Body: raw, At: at})
			require.NoError(t, err)
			got, err := appendRecord([]byte("left as it was"), 3, e, at)
			require.NoError(t, err)
			require.Equal(t, "left as it was"+string(want), string(got), "body %q key %q", body, key)
		}
	}
	// A body that is json.Marshal's text goes in as it is (AppendMarshalled)
	// and makes the same record.
	for _, v := range []any{nil, map[string]any{"a": 1, "b": []int{1, 2}}, "<b>&amp;</b>\u2028", []string{"caf\u00e9", `q"uote\\`}} {
		body, err := json.Marshal(v)
		require.NoError(t, err)
		e := Event{Key: "a<b>", Kind: "k", Body: body}
		want, err := appendRecord(nil, 0, e, at)
		require.NoError(t, err)
		got, err := appendRecordAs([]byte("x"), 0, e, at, true)
		require.NoError(t, err)
		require.Equal(t, "x"+string(want), string(got), "body %s", body)
	}
	for _, e := range []Event{{Key: "k", Kind: "x", Body: json.RawMessage(`{"a":`)}, {Key: "k", Kind: "x", Body: json.RawMessage(`{} {}`)},
		{Key: "", Kind: "x"}, {Key: "k", Kind: ""}, {Key: "k", Kind: "x", Body: json.RawMessage(`"` + string(make([]byte, MaxBodyBytes)) + `"`)}} {
		_, err := appendRecord(nil, 0, e, at)
		require.True(t, errors.Is(err, ErrInvalid), "%v", err)
		require.Equal(t, Validate([]Event{e}).Error(), err.Error())
		if validateFrame(0, e) != nil {
			// the frame is checked on the marshalled path too
			_, err = appendRecordAs(nil, 0, e, at, true)
			require.Equal(t, Validate([]Event{e}).Error(), err.Error())
		}
	}
}

// TestHTMLEscapedIsContainsAny: htmlEscaped answers what bytes.ContainsAny
// with json.Marshal's escaped characters answers, on bodies with each of
// them, with the bytes around U+2028 and U+2029 that are not they (U+2027,
// U+202A, a cut rune at the end, invalid UTF-8) and without any.
func TestHTMLEscapedIsContainsAny(t *testing.T) {
	bodies := []string{"", `{}`, `{"a":"<"}`, `{"a":">"}`, `&`, "x\u2028", "\u2029y", "a\u2027b", "a\u202ab",
		"\xe2", "\xe2\x80", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaa", "\xe2\x81\xa8", "\xff\xe2\x80\xa8",
		`{"k":"caf` + "\u00e9" + `"}`, `{"transfers":[{"u":"1","s":2}]}`}
	for _, body := range bodies {
		want := bytes.ContainsAny([]byte(body), "<>&\u2028\u2029")
		require.Equal(t, want, htmlEscaped([]byte(body)), "%q", body)
	}
}

// BenchmarkAppendRecord: one op is the record of a 32 KB transfers-like
// body, compacted and checked (Append) or as it is (AppendMarshalled).
func BenchmarkAppendRecord(b *testing.B) {
	body := transfersLikeBody(b)
	e := Event{Key: "transfers:150:0011223344556677", Kind: "transfers", Body: body}
	at := time.Date(2026, 11, 30, 12, 0, 0, 1, time.UTC)
	for _, marshalled := range []bool{false, true} {
		b.Run(map[bool]string{false: "compact", true: "marshalled"}[marshalled], func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var rec []byte
			for b.Loop() {
				var err error
				rec, err = appendRecordAs(rec[:0], 0, e, at, marshalled)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDecodeRecordReadsTheFrame: every record appendRecord writes is read
// by the frame (no scan of its body) into what json.Unmarshal reads from
// it, and a record in another shape still decodes through json.Unmarshal.
func TestDecodeRecordReadsTheFrame(t *testing.T) {
	ats := []time.Time{time.Date(2026, 11, 29, 12, 50, 1, 234_567_000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		time.Date(2026, 12, 1, 5, 0, 0, 1, time.FixedZone("x", -7*3600-30*60))}
	bodies := []string{"", `{}`, `0`, `"s"`, `{"a": 1,  "b" : [1, 2 ,3]}`, `"<b>&amp;</b>"`, `{"at":"x"}`, `[",\"at\":"]`,
		`{"x":"line` + "\u2028" + `"}`, `{"deep":{"er":[{"st":"q\"uote\\"}]}}`}
	keys := []string{"k1", "transfers:5:0011223344556677", "a<b>&c", "caf\u00e9", `q"uo\te`, `ends\`, "sep\u2028"}
	for _, at := range ats {
		for _, body := range bodies {
			for _, key := range keys {
				raw, err := appendRecord(nil, 0, Event{Key: key, Kind: "k<ind>", Body: json.RawMessage(body)}, at)
				require.NoError(t, err)
				var want record
				require.NoError(t, json.Unmarshal(raw, &want))
				got, ok := decodeRecordFrame(string(raw))
				require.True(t, ok, "%s", raw)
				require.Equal(t, Stored{Key: want.Key, Kind: want.Kind, At: want.At, Body: want.Body}, got, "%s", raw)
				require.True(t, want.At.Equal(at))
			}
		}
	}
	// another writer's spacing: not the frame, read as before
	raw := `{ "key": "k", "kind": "x", "body": {"a": 1}, "at": "2026-12-01T05:00:00Z" }`
	_, ok := decodeRecordFrame(raw)
	require.False(t, ok)
	s, err := decodeRecord(7, raw)
	require.NoError(t, err)
	require.Equal(t, Stored{ID: 7, Key: "k", Kind: "x", At: time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC), Body: json.RawMessage(`{"a": 1}`)}, s)
	for _, bad := range []string{"", "{", `{"key":"k"`, `{"key":"k","kind":"x","body":,"at":"2026-12-01T05:00:00Z"}`,
		`{"key":"k","kind":"x","body":1,"at":"yesterday"}`, `{"key":k,"kind":"x","body":1,"at":"2026-12-01T05:00:00Z"}`} {
		_, ok := decodeRecordFrame(bad)
		require.False(t, ok, bad)
		_, err := decodeRecord(1, bad)
		require.Error(t, err, bad)
	}
}

// FuzzDecodeRecord: decoding never panics, and what the frame reads from
// any text whose body is JSON is what json.Unmarshal reads from it.
func FuzzDecodeRecord(f *testing.F) {
	at := time.Date(2026, 11, 29, 12, 50, 1, 234_567_000, time.UTC)
	for _, body := range []string{`{}`, `{"at":"x"}`, `[1,2]`, `null`} {
		raw, err := appendRecord(nil, 0, Event{Key: `k"1`, Kind: "transfers", Body: json.RawMessage(body)}, at)
		require.NoError(f, err)
		f.Add(string(raw))
	}
	f.Add(`{"key":"k","kind":"x","body":1,"at":"2026-12-01T05:00:00Z","at":"2027-12-01T05:00:00Z"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		got, ok := decodeRecordFrame(raw)
		_, _ = decodeRecord(1, raw)
		var want record
		if !ok || !json.Valid(got.Body) || json.Unmarshal([]byte(raw), &want) != nil {
			return
		}
		require.Equal(t, want.Key, got.Key, raw)
		require.Equal(t, want.Kind, got.Kind, raw)
		require.Equal(t, string(want.Body), string(got.Body), raw)
		require.True(t, want.At.Equal(got.At), raw)
	})
}

// BenchmarkDecodeRecord: one op reads the record of a 32 KB transfers-like
// body, by its frame (decodeRecord) or by json.Unmarshal (before s51).
func BenchmarkDecodeRecord(b *testing.B) {
	body := transfersLikeBody(b)
	raw, err := appendRecord(nil, 0, Event{Key: "transfers:150:0011223344556677", Kind: "transfers", Body: body}, time.Now())
	require.NoError(b, err)
	text := string(raw)
	b.Run("frame", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := decodeRecord(1, text); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var r record
			if err := json.Unmarshal([]byte(text), &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// transfersLikeBody is a 32 KB body shaped like a feed round's transfers
// event: one torrent with many rows.
func transfersLikeBody(tb testing.TB) []byte {
	row := `{"key":"1234:0123456789abcdef0123456789abcdef01234567:42","user_id":"1234","seq":42,"uploaded":123456789,"downloaded":987654321,"up_credited":123456789,"down_credited":0,"seed_seconds":3600,"leech_seconds":120}`
	body := []byte(`{"version":2,"torrents":[{"info_hash":"0123456789abcdef0123456789abcdef01234567","torrent_id":"7","seeders":3,"leechers":1,"snatches":9,"rows":[`)
	for len(body) < 32<<10 {
		body = append(append(body, row...), ',')
	}
	body = append(body[:len(body)-1], "]}]}"...)
	require.True(tb, json.Valid(body))
	return body
}

// TestAppendStoredJSONIsWhatJSONMarshalWrites: an event as the outbox
// hands it out (decodeRecord of what appendRecord stored), with and
// without attempts and a last error, is written byte for byte as
// json.Marshal writes it.
func TestAppendStoredJSONIsWhatJSONMarshalWrites(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 50, 1, 234_567_000, time.FixedZone("y", 3600))
	bodies := []string{"", `{}`, `{"a": 1,  "b" : [1, 2 ,3]}`, `"<b>&amp;</b>"`, `{"x":"line` + "\u2028" + `"}`, `{"k":"caf\u00e9"}`}
	for _, body := range bodies {
		for _, key := range []string{"k1", "a<b>&c", `q"uo\te`, "sep\u2029"} {
			raw, err := appendRecord(nil, 0, Event{Key: key, Kind: "k<ind>", Body: json.RawMessage(body)}, at)
			require.NoError(t, err)
			s, err := decodeRecord(18446744073709551615, string(raw))
			require.NoError(t, err)
			for _, extra := range []Stored{{}, {Attempts: 3}, {LastError: "webhook answered 503 <Service Unavailable> & \"more\""}, {Attempts: 1, LastError: "x"}} {
				s.Attempts, s.LastError = extra.Attempts, extra.LastError
				want, err := json.Marshal(s)
				require.NoError(t, err)
				require.Equal(t, "prefix"+string(want), string(AppendStoredJSON([]byte("prefix"), s)), "%s", raw)
			}
		}
	}
	want, err := json.Marshal(Stored{ID: 1})
	require.NoError(t, err)
	require.Equal(t, string(want), string(AppendStoredJSON(nil, Stored{ID: 1})), "no body, the zero time")
}

// BenchmarkAppendStoredJSON: one op writes an event with a 32 KB
// transfers-like body as the pull API answers it, by AppendStoredJSON or
// by json.Marshal (c.JSON, before s51).
func BenchmarkAppendStoredJSON(b *testing.B) {
	s := Stored{ID: 17, Key: "transfers:150:0011223344556677", Kind: "transfers", At: time.Now(), Body: transfersLikeBody(b)}
	b.Run("stored", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			out = AppendStoredJSON(out[:0], s)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWebhookBodyIsWhatJSONMarshalWrites: a webhook request's body is
// byte for byte what json.Marshal wrote for it before s51.
func TestWebhookBodyIsWhatJSONMarshalWrites(t *testing.T) {
	at := time.Date(2026, 12, 1, 5, 50, 0, 123, time.FixedZone("z", -3600))
	for _, events := range [][]WebhookEvent{nil, {}, {
		{ID: "1", Key: "notice:1", Kind: "notice", At: at, Attempt: 1, Body: json.RawMessage(`{"user":"0"}`)},
		{ID: "17", Key: "a<b>&\"c\"", Kind: "k<ind>", At: at, Attempt: 3, Body: json.RawMessage(`{"x":"\u003c"}`)},
		{ID: "18", Key: "k", Kind: "cheat", Body: nil},
	}} {
		want, err := json.Marshal(WebhookBody{Events: events})
		require.NoError(t, err)
		require.Equal(t, "x"+string(want), string(appendWebhookBody([]byte("x"), WebhookBody{Events: events})))
	}
}
