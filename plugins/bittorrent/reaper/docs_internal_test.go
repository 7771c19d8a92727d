package reaper

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTheDocumentedEventIsOneTheReaperSends: the webhook request shown in
// docs/bittorrent-reaper.md decodes, field for field, into what the reaper
// publishes (kind, key and body), so a site written from the document
// reads the real events. (It once showed a kind, notice-initial, that no
// code sends.)
func TestTheDocumentedEventIsOneTheReaperSends(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/bittorrent-reaper.md")
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "**The request.**")
	require.NotEqual(t, -1, start, "the section that shows the request")
	open := strings.Index(text[start:], "```json\n")
	require.NotEqual(t, -1, open)
	block := text[start+open+len("```json\n"):]
	block = block[:strings.Index(block, "```")]

	var request struct {
		Events []struct {
			ID      string          `json:"id"`
			Key     string          `json:"idempotency_key"`
			Kind    string          `json:"kind"`
			At      time.Time       `json:"at"`
			Attempt int             `json:"attempt"`
			Body    json.RawMessage `json:"body"`
		} `json:"events"`
	}
	strict := json.NewDecoder(strings.NewReader(block))
	strict.DisallowUnknownFields()
	require.NoError(t, strict.Decode(&request), block)
	require.Len(t, request.Events, 1)
	ev := request.Events[0]
	require.Equal(t, KindNotice, ev.Kind)

	var body NoticeBody
	strict = json.NewDecoder(bytes.NewReader(ev.Body))
	strict.DisallowUnknownFields()
	require.NoError(t, strict.Decode(&body))
	step := map[string]Step{"initial": NotifyInitial, "final": NotifyFinal}[body.Step]
	require.NotZero(t, step, "step %q is one the reaper sends", body.Step)
	require.Equal(t, noticeKey(step, body.User, body.Run), ev.Key, "the key is built as the reaper builds it")
	require.NotEmpty(t, body.Torrents)
	for _, torrent := range body.Torrents {
		require.Contains(t, []string{"never", "unseeded"}, torrent.State)
		require.Len(t, torrent.InfoHash, 40)
	}
	// What the reaper would send for the same notice marshals to the same body.
	again := newEvent(KindNotice, noticeKey(step, body.User, body.Run), body)
	require.JSONEq(t, string(ev.Body), string(again.Body))
}
