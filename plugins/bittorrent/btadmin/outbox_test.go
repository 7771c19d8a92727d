package btadmin_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"

	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// outboxFixture is hoard's admin side with an outbox on the same Redis
// as the plugin's (here, the test appends through its own).
func outboxFixture(t *testing.T, b redistest.Backend) (*fixture, *outbox.Outbox) {
	t.Helper()
	_, p, err := outbox.ParseSettings(json.RawMessage(`{"keep_delivered":3}`))
	require.NoError(t, err)
	ob := outbox.New(b.Client, outbox.Config{Policy: p, Clock: clock.NewFake(outboxStart), Logger: quiet})
	f := newFixture(t, b, parts{admin: &btadmin.Admin{Outbox: ob}, logger: quiet})
	return f, ob
}

var outboxStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func outboxEvents(n int) []outbox.Event {
	out := make([]outbox.Event, n)
	for i := range out {
		out[i] = outbox.Event{Key: fmt.Sprintf("notice:%d", i+1), Kind: "notice-initial", Body: json.RawMessage(fmt.Sprintf(`{"user":"%d"}`, i))}
	}
	return out
}

// TestOutboxPollAndAck: a polling site pages with the cursor and
// acknowledges; the counts follow; the token is required.
func TestOutboxPollAndAck(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, ob := outboxFixture(t, b)
		require.NoError(t, ob.Append(f.ctx, outboxEvents(5)))

		r := f.admin(http.MethodGet, "/bittorrent/outbox/events", "", "")
		require.Equal(t, http.StatusUnauthorized, r.status)

		r = f.admin(http.MethodGet, "/bittorrent/outbox/events?limit=2", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var page btadmin.OutboxEventsReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &page))
		require.Len(t, page.Events, 2)
		require.Equal(t, "notice:1", page.Events[0].Key)
		require.Equal(t, "2", page.Next)
		require.Equal(t, int64(5), page.Counts.Pending)
		require.JSONEq(t, `{"user":"0"}`, string(page.Events[0].Body))

		r = f.admin(http.MethodGet, "/bittorrent/outbox/events?after="+page.Next, "", token)
		require.NoError(t, json.Unmarshal([]byte(r.body), &page))
		require.Len(t, page.Events, 3)
		require.Equal(t, "5", page.Next)

		r = f.admin(http.MethodPost, "/bittorrent/outbox/ack", `{"ids":["1",2,"3"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var change btadmin.OutboxChangeReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &change))
		require.Equal(t, 3, change.Acknowledged)
		require.Equal(t, int64(2), change.Counts.Pending)

		r = f.admin(http.MethodGet, "/bittorrent/outbox/stats", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var counts outbox.Counts
		require.NoError(t, json.Unmarshal([]byte(r.body), &counts))
		require.Equal(t, outbox.Counts{Pending: 2, Kept: 3, Appended: 5, Delivered: 3}, counts)
	})
}

// TestOutboxAdminRefusesBadInputAndChangesNothing: a bad cursor or
// limit, an unknown or already acknowledged id, a malformed body: each
// has its reason, and nothing is acknowledged.
func TestOutboxAdminRefusesBadInputAndChangesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f, ob := outboxFixture(t, b)
		require.NoError(t, ob.Append(f.ctx, outboxEvents(3)))
		_, err := ob.Ack(f.ctx, []uint64{1})
		require.NoError(t, err)

		for path, says := range map[string]string{
			"/bittorrent/outbox/events?after=abc":  "cursor",
			"/bittorrent/outbox/events?after=-1":   "cursor",
			"/bittorrent/outbox/events?after=1.5":  "cursor",
			"/bittorrent/outbox/events?limit=0":    "limit",
			"/bittorrent/outbox/events?limit=5000": "limit",
			"/bittorrent/outbox/dead?after=x":      "cursor",
		} {
			requireError(t, f.admin(http.MethodGet, path, "", token), http.StatusBadRequest, says)
		}
		for body, want := range map[string]struct {
			status int
			says   string
		}{
			`{"ids":["2","99"]}`: {http.StatusNotFound, "event 99 was never given"},
			`{"ids":[]}`:         {http.StatusBadRequest, "give 1 to 1000 event ids"},
			`{"ids":["x"]}`:      {http.StatusBadRequest, `event id "x"`},
			`{"ids":["0"]}`:      {http.StatusBadRequest, `event id "0"`},
			`{"all":true}`:       {http.StatusBadRequest, "acknowledge events by id"},
			`{"ids":"2"}`:        {http.StatusBadRequest, ""},
			`not json`:           {http.StatusBadRequest, ""},
		} {
			r := f.admin(http.MethodPost, "/bittorrent/outbox/ack", body, token)
			requireError(t, r, want.status, want.says)
		}
		requireError(t, f.admin(http.MethodPost, "/bittorrent/outbox/dead/retry", `{"ids":["2"]}`, token), http.StatusNotFound, "event 2 is not dead")
		counts, err := ob.Counts(f.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counts.Pending, "no refused call acknowledged anything")
		require.Equal(t, int64(1), counts.Delivered)

		// A site retrying its ack of event 1 after a timeout succeeds, and
		// nothing is counted twice.
		r := f.admin(http.MethodPost, "/bittorrent/outbox/ack", `{"ids":["1"]}`, token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var changed btadmin.OutboxChangeReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &changed))
		require.Equal(t, 0, changed.Acknowledged)
		require.Equal(t, 1, changed.AlreadyAcknowledged)
		require.Equal(t, int64(1), changed.Counts.Delivered)
		require.Equal(t, int64(2), changed.Counts.Pending)

		off := newFixture(t, b, parts{admin: &btadmin.Admin{}})
		requireError(t, off.admin(http.MethodGet, "/bittorrent/outbox/events", "", token), http.StatusServiceUnavailable, "no BitTorrent outbox")
	})
}
