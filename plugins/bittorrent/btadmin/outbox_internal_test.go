package btadmin

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// TestEventsReplyIsWhatJSONMarshalWrites: …/events and …/dead answer byte
// for byte what c.JSON (json.Marshal) answered before s51, for no events,
// an empty page and a page of several.
func TestEventsReplyIsWhatJSONMarshalWrites(t *testing.T) {
	at := time.Date(2026, 12, 1, 5, 50, 0, 123, time.UTC)
	pages := [][]outbox.Stored{nil, {}, {
		{ID: 1, Key: "notice:1", Kind: "notice", At: at, Body: json.RawMessage(`{"user":"0"}`)},
		{ID: 17, Key: "a<b>", Kind: "transfers", At: at, Body: json.RawMessage(`{"x":"\u003c"}`), Attempts: 2, LastError: "503 & more"},
		{ID: 18, Key: "k", Kind: "cheat", At: at.Add(time.Hour), Body: json.RawMessage(`[1,2]`)},
	}}
	for _, events := range pages {
		r := OutboxEventsReply{Events: events, Next: "18", Counts: outbox.Counts{Pending: 3, Dead: 1, Appended: 9, Delivered: 5}}
		want, err := json.Marshal(r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendEventsReply(nil, r)))
	}
}
