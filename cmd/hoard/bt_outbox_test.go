package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"

	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// TestCLIReaperEvents drives `hoard bt reaper events` and `hoard bt
// outbox` against a real server: a polling site lists, acknowledges and
// moves on; bad input is refused with its reason and changes nothing.
func TestCLIReaperEvents(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		engine := queues.NewEngine(b.Client, queues.Options{Logger: quiet})
		ob := outbox.New(b.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
		srv, err := server.New(server.Config{AdminToken: "cli-token", Logger: quiet,
			PluginAPI: newBTAPI(&btadmin.Admin{Outbox: ob}, nil)}, engine)
		require.NoError(t, err)
		ts := httptest.NewServer(srv.Handler())
		defer ts.Close()
		var events []outbox.Event
		for i := 1; i <= 5; i++ {
			events = append(events, outbox.Event{Key: fmt.Sprintf("removal:%d", i), Kind: "removal", Body: json.RawMessage(`{"torrent":"7"}`)})
		}
		require.NoError(t, ob.Append(ctx, events))

		out, stderr, err := runCLIWithStderr(t, ts.URL, "bt", "reaper", "events", "--limit", "2")
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2)
		var first outbox.Stored
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
		require.Equal(t, "removal:1", first.Key)
		require.Equal(t, uint64(1), first.ID)
		require.Contains(t, stderr, "next: --after 2 (5 pending, 0 dead)")

		out, stderr, err = runCLIWithStderr(t, ts.URL, "bt", "reaper", "events", "--after", "2", "--ack")
		require.NoError(t, err)
		require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3)
		require.Contains(t, stderr, "acknowledged 3 events")
		require.Contains(t, stderr, "next: --after 5 (2 pending, 0 dead)")

		for _, bad := range [][]string{
			{"bt", "reaper", "events", "--after", "abc"},
			{"bt", "reaper", "events", "--after", "-3"},
			{"bt", "reaper", "events", "--limit", "0"},
			{"bt", "outbox", "retry", "x"},
			{"bt", "outbox", "retry"},
		} {
			_, err := runCLI(t, ts.URL, bad...)
			require.Error(t, err, bad)
		}
		_, err = runCLI(t, ts.URL, "bt", "outbox", "retry", "1")
		require.ErrorContains(t, err, "event 1 is not dead")
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counts.Pending)
		require.Equal(t, int64(3), counts.Delivered)

		out, err = runCLI(t, ts.URL, "bt", "outbox", "stats")
		require.NoError(t, err)
		require.Regexp(t, `pending\s+2`, out)
		require.Regexp(t, `delivered\s+3`, out)
	})
}
