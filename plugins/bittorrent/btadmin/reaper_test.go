package btadmin_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
	"github.com/hoardproject/hoard/queues"

	"github.com/hoardproject/hoard/plugins/bittorrent/btadmin"
)

// TestBitTorrentAdminReaper: extend (one torrent, by user; bad input
// changes nothing; logged with its actor), preview (changes nothing),
// counts and a torrent's reaper state; 503 when the reaper is off.
func TestBitTorrentAdminReaper(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		admin, err := swarm.New(b.Client, swarm.Config{Logger: quiet})
		require.NoError(t, err)
		clock := swarm.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		reap := reaper.New(b.Client, reaper.Config{Policy: reaper.DefaultPolicy(), Now: clock.Now, Logger: quiet})
		logs := &lockedBuffer{}
		fx := newFixture(t, b, parts{admin: &btadmin.Admin{Store: admin, Reaper: reap}, logger: slog.New(slog.NewTextHandler(logs, nil))})
		f := &btFixture{fixture: fx, adminStore: admin, clock: clock, logs: logs}

		in, out := btHash("in"), btHash("out")
		for _, h := range [][20]byte{in, out} {
			r := f.call(http.MethodPut, "/torrents/"+btHex(h), `{"id":"1","uploader":"up","value":2.5,"created":"2026-03-01T00:00:00Z"}`)
			require.Equal(t, http.StatusOK, r.status, r.body)
		}
		r := f.call(http.MethodGet, "/torrents/"+btHex(in), "")
		require.Equal(t, 2.5, decode(t, r.body)["value"])

		r = f.call(http.MethodGet, "/reaper/preview", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var preview reaper.Preview
		require.NoError(t, json.Unmarshal([]byte(r.body), &preview))
		require.Len(t, preview.Steps, 2, "both are older than 8 h and never seeded")
		require.Equal(t, reaper.NotifyInitial, preview.Steps[0].Step)
		state, err := reap.State(f.ctx, in)
		require.NoError(t, err)
		require.Empty(t, state.Pending, "the preview queued nothing")

		names, err := reap.Tick(f.ctx)
		require.NoError(t, err)
		for _, n := range names {
			if strings.Contains(n, btHex(in)) {
				_, err := reap.Apply(f.ctx, n)
				require.NoError(t, err)
			}
		}
		before, err := reap.State(f.ctx, in)
		require.NoError(t, err)

		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`","days":0}`), http.StatusBadRequest, "want a whole number from 1 to 3650")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`","days":-3}`), http.StatusBadRequest, "want a whole number")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`","days":"ten"}`), http.StatusBadRequest, "want a whole number")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`","days":1.5}`), http.StatusBadRequest, "want a whole number")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`"}`), http.StatusBadRequest, "want a whole number")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"days":3}`), http.StatusBadRequest, "name one torrent or one user")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"zz","days":3}`), http.StatusBadRequest, "want 40 hex characters")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(btHash("nope"))+`","days":3}`), http.StatusNotFound, "is not registered")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(out)+`","days":3}`), http.StatusConflict, "(no notice): nothing to extend")
		requireError(t, f.call(http.MethodPost, "/reaper/extend", `{"user":"nobody","days":3}`), http.StatusNotFound, "no upload in the reaper's process")
		after, err := reap.State(f.ctx, in)
		require.NoError(t, err)
		require.Equal(t, before, after, "bad input changed nothing")

		r = f.call(http.MethodPost, "/reaper/extend", `{"info_hash":"`+btHex(in)+`","days":10}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var ext btadmin.ExtendReply
		require.NoError(t, json.Unmarshal([]byte(r.body), &ext))
		require.Equal(t, 10*24*time.Hour, ext.Extended[0].UnseededDate.Sub(before.UnseededDate))
		r = f.call(http.MethodPost, "/reaper/extend", `{"user":"up","days":1}`)
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.NoError(t, json.Unmarshal([]byte(r.body), &ext))
		require.Len(t, ext.Extended, 1, "only the upload with a notice")

		r = f.call(http.MethodGet, "/reaper/torrents/"+btHex(in), "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		require.Equal(t, "never", decode(t, r.body)["state"])
		requireError(t, f.call(http.MethodGet, "/reaper/torrents/"+btHex(btHash("nope")), ""), http.StatusNotFound, "not found")

		r = f.call(http.MethodGet, "/reaper/counts", "")
		require.Equal(t, http.StatusOK, r.status, r.body)
		var counts reaper.Counts
		require.NoError(t, json.Unmarshal([]byte(r.body), &counts))
		require.Equal(t, int64(2), counts.Extensions)
		require.Equal(t, int64(1), counts.InitialDone)

		r = f.admin(http.MethodGet, "/log", "", token)
		require.Equal(t, http.StatusOK, r.status, r.body)
		var log struct{ Changes []queues.ChangeEntry }
		require.NoError(t, json.Unmarshal([]byte(r.body), &log))
		var extensions []string
		for _, entry := range log.Changes {
			if entry.What == "reaper grace extended" {
				require.Equal(t, "site-web1", entry.By)
				extensions = append(extensions, string(entry.Details))
			}
		}
		require.ElementsMatch(t, []string{
			`{"days":10,"info_hashes":["` + btHex(in) + `"]}`,
			`{"days":1,"info_hashes":["` + btHex(in) + `"],"user":"up"}`,
		}, extensions)

		off := newFixture(t, b, parts{admin: &btadmin.Admin{Store: admin}})
		requireError(t, off.admin(http.MethodGet, "/bittorrent/reaper/counts", "", token), http.StatusServiceUnavailable, "the unseeded reaper is off")
	})
}
