package btplugin_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// A token's use and end, reported by a private store, reach the outbox
// once each (a second report of the same event is deduplicated by its
// key), with the body docs/bittorrent-site.md shows.
func TestTokenEventsReachTheOutbox(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := outbox.New(b.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		clock := swarm.NewFakeClock(time.Date(2026, 11, 28, 21, 0, 0, 0, time.UTC))
		report := btplugin.TokenReporter(ob, slog.New(slog.NewTextHandler(io.Discard, nil)))
		var heard []swarm.TokenEvent
		store, err := swarm.New(b.Client, swarm.Config{Private: true, Clock: clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnToken: func(ctx context.Context, e swarm.TokenEvent) { heard = append(heard, e); report(ctx, e) }})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Stop() })
		hash := bittorrent.InfoHash(sha1.Sum([]byte("token.flac")))
		require.NoError(t, store.RegisterTorrent(ctx, hash, "88"))
		passkey := "tokenpasskey0000000000000000000a"
		require.NoError(t, store.AddUser(ctx, passkey, "7"))
		require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
		require.NoError(t, store.GrantToken(ctx, hash, "7", clock.Now().Add(time.Hour)))
		announce := func(event bittorrent.Event, down uint64) {
			var peer bittorrent.PeerID
			copy(peer[:], "-TR3000-tokenpeer001")
			_, err := store.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer, Passkey: passkey,
				Left: 1 << 20, Downloaded: down, Event: event, Addr: netip.MustParseAddrPort("127.0.0.1:6881")})
			require.NoError(t, err)
		}
		announce(bittorrent.EventStarted, 0)
		announce(bittorrent.EventNone, 1000)
		clock.Advance(time.Hour)
		announce(bittorrent.EventNone, 2000)
		require.Len(t, heard, 2)
		report(ctx, heard[0]) // reported again: stored once

		events, _, err := ob.Pending(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, events, 2)
		for i, want := range []string{"used", "ended"} {
			var body btplugin.TokenEvent
			dec := json.NewDecoder(bytes.NewReader(events[i].Body))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&body))
			require.Equal(t, btplugin.TokenEventKind, events[i].Kind)
			require.Equal(t, want, body.Event)
			require.Equal(t, "7", body.UserID)
			require.Equal(t, "88", body.TorrentID)
			require.Equal(t, btstore.HexInfoHash(hash), body.InfoHash)
			require.Equal(t, "token:7:"+body.InfoHash+":"+strconv.FormatInt(body.Used.UnixMilli(), 10)+":"+want, events[i].Key)
		}
	})
}

func TestTheDocumentedTokenEventIsOneThePluginSends(t *testing.T) {
	ev := documentedEvent(t, "Personal tokens")
	require.Equal(t, btplugin.TokenEventKind, ev.Kind)
	var body btplugin.TokenEvent
	dec := json.NewDecoder(bytes.NewReader(ev.Body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body))
	require.Equal(t, "token:"+body.UserID+":"+body.InfoHash+":"+strconv.FormatInt(body.Used.UnixMilli(), 10)+":"+body.Event, ev.Key)
	again, err := json.Marshal(body)
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Body), string(again), "the plugin marshals the same body")
}
