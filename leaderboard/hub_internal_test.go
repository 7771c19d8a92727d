package leaderboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

type staticSource struct{}

func (staticSource) Counts(context.Context, string) (queues.Counts, error) {
	return queues.Counts{}, nil
}
func (staticSource) Recent(context.Context, string, int) ([]json.RawMessage, error) {
	return []json.RawMessage{}, nil
}

// serveHub starts hub behind a test server whose errors are 503s.
func serveHub(t *testing.T, hub *Hub) string {
	t.Helper()
	require.NoError(t, hub.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, hub.Stop()) })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := hub.Serve(w, r, "live"); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ts.Close)
	return "ws" + strings.TrimPrefix(ts.URL, "http")
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestStopDuringUpgradeLeaksNoViewer: Stop runs while a viewer is being
// upgraded (from inside the origin check, the last step before the
// upgrade); the viewer is closed at once instead of outliving the hub.
func TestStopDuringUpgradeLeaksNoViewer(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub := NewHub(Config{Logger: quietLogger}, b.Client, staticSource{})
		hub.up.CheckOrigin = func(*http.Request) bool {
			require.NoError(t, hub.Stop())
			return true
		}
		url := serveHub(t, hub)
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		require.NoError(t, err, "the upgrade itself went through")
		defer conn.Close()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, _, err = conn.ReadMessage()
		require.True(t, websocket.IsCloseError(err, websocket.CloseGoingAway), "closed by the stopped hub, got %v", err)
		require.Zero(t, hub.Viewers())
	})
}

// TestMaxViewersHoldsDuringUpgrades: while one upgrade is in progress the
// only slot is taken, so a second viewer is refused rather than both
// passing the check.
func TestMaxViewersHoldsDuringUpgrades(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		hub := NewHub(Config{Logger: quietLogger, MaxViewers: 1}, b.Client, staticSource{})
		entered, release := make(chan struct{}), make(chan struct{})
		var held atomic.Bool
		hub.up.CheckOrigin = func(*http.Request) bool {
			if held.CompareAndSwap(false, true) { // hold the first upgrade only
				close(entered)
				<-release
			}
			return true
		}
		url := serveHub(t, hub)
		type dialed struct {
			conn *websocket.Conn
			err  error
		}
		done := make(chan dialed, 1)
		go func() {
			conn, _, err := websocket.DefaultDialer.Dial(url, nil)
			done <- dialed{conn, err}
		}()
		<-entered
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if conn != nil {
			conn.Close()
		}
		close(release)
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		d := <-done
		require.NoError(t, d.err)
		defer d.conn.Close()
		require.Equal(t, 1, hub.Viewers())
	})
}
