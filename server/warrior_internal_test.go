package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

// TestMultiItemReplyIsItemReplys: the multi=N reply written from the
// names is itemReply's from their NUL-join, byte for byte, for names that
// need no escape and names that do (HTML characters, quotes, non-ASCII).
func TestMultiItemReplyIsItemReplys(t *testing.T) {
	for _, names := range [][]string{
		{"bench/item/000000001", "bench/item/000000002"},
		{"a&b", `q"uote`, "<x>", "ünïcödé", `back\slash`, "plain"},
		{"url:https://example.org/?a=1&b=2", "\u2028", "x"},
	} {
		items := make([]queues.ClaimedItem, len(names))
		for i, name := range names {
			items[i] = queues.ClaimedItem{Name: name}
		}
		want, err := itemReply(strings.Join(names, "\x00"), queues.ClaimResult{Items: items, ProjectExtra: []byte("{}")})
		require.NoError(t, err)
		require.Equal(t, string(want), string(multiItemReply(items)), names)
	}
}
