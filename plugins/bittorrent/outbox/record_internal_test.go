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
	for _, e := range []Event{{Key: "k", Kind: "x", Body: json.RawMessage(`{"a":`)}, {Key: "k", Kind: "x", Body: json.RawMessage(`{} {}`)},
		{Key: "", Kind: "x"}, {Key: "k", Kind: ""}, {Key: "k", Kind: "x", Body: json.RawMessage(`"` + string(make([]byte, MaxBodyBytes)) + `"`)}} {
		_, err := appendRecord(nil, 0, e, at)
		require.True(t, errors.Is(err, ErrInvalid), "%v", err)
		require.Equal(t, Validate([]Event{e}).Error(), err.Error())
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
