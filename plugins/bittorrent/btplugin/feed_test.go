package btplugin_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btplugin"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

const feedSecret = "feed-test-secret-0123456789abcdef"

// feedKill names the torrents and users of TestFeedSurvivesKilledFrontends,
// which its child processes announce on too.
func feedKillHashes() []bittorrent.InfoHash {
	var hashes []bittorrent.InfoHash
	for i := range 3 {
		hashes = append(hashes, bittorrent.InfoHash(sha1.Sum([]byte(fmt.Sprintf("feed-kill-%d", i)))))
	}
	return hashes
}

var feedKillUsers = []string{"11", "12", "13"}

// feedAnnounceAll has every user announce on every torrent at step (1:
// started), moving their transfer, and flushes the batch.
func feedAnnounceAll(ctx context.Context, store *swarm.Store, step int) error {
	for i, hash := range feedKillHashes() {
		for j, u := range feedKillUsers {
			var peer bittorrent.PeerID
			copy(peer[:], fmt.Sprintf("-TR3000-%06d%06d", i, j))
			event := bittorrent.EventNone
			if step == 1 {
				event = bittorrent.EventStarted
			}
			_, err := store.Announce(ctx, &bittorrent.AnnounceRequest{InfoHash: hash, PeerID: peer,
				Passkey: "feedpasskey000000000000000000" + u + "x", Left: 1 << 30, Event: event,
				Uploaded: uint64(step * 1000 * (j + 1)), Downloaded: uint64(step * 7000),
				Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i), byte(j + 1)}), 6881)})
			if err != nil {
				return err
			}
		}
	}
	return store.Flush(ctx)
}

// runFeedChild is a frontend with a feed (its rows held in its memory)
// that answers one step of announces (FEED_CHILD_STEP) and then, with
// FEED_CHILD_MODE "held", says "answered" on stdout and waits for its
// SIGKILL with every row only in memory; with "midflush", runs a feed
// round into the outbox and, once its batch is appended and before the
// round is recorded, says "delivered" and waits for its SIGKILL.
func runFeedChild(redisURL string) int {
	rdb, err := redisurl.Dial(redisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ob := outbox.New(rdb, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
	deliver := btplugin.FeedDeliverer(ob)
	pausing := func(ctx context.Context, b []swarm.FeedBatch) error {
		if err := deliver(ctx, b); err != nil {
			return err
		}
		fmt.Println("delivered")
		time.Sleep(time.Hour) // until SIGKILL
		return nil
	}
	// A short flush interval: the heartbeat outlives the last beat by a
	// second, so the parent's backstop finds it dead soon.
	store, err := swarm.New(rdb, swarm.Config{Private: true, Logger: quiet, FlushInterval: 100 * time.Millisecond,
		OnFeed: pausing})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	step, _ := strconv.Atoi(os.Getenv("FEED_CHILD_STEP"))
	if err := feedAnnounceAll(ctx, store, step); err != nil {
		fmt.Fprintln(os.Stderr, "feed child:", err)
		return 2
	}
	if os.Getenv("FEED_CHILD_MODE") == "held" {
		fmt.Println("answered")
		time.Sleep(time.Hour) // until SIGKILL
		return 3
	}
	_, err = store.FeedRound(ctx, pausing)
	fmt.Fprintln(os.Stderr, "feed child: the round ended without a batch:", err)
	return 3
}

// siteLedger is a site's receiver: it checks nothing but the signature,
// drops a row whose key it has seen and keeps the newest seq per user and
// torrent, as docs/bittorrent-site.md tells a site to.
type siteLedger struct {
	mu       sync.Mutex
	seen     map[string]bool
	newest   map[string]btplugin.TransferRow
	copies   int
	events   int // transfers events received
	torrents map[string]btplugin.TransferEvent
}

func (l *siteLedger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if err := outbox.VerifySignature([]byte(feedSecret), r.Header.Get(outbox.SignatureHeader), payload, time.Now(), outbox.DefaultTolerance); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var body outbox.WebhookBody
	if err := json.Unmarshal(payload, &body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range body.Events {
		if e.Kind != btplugin.TransfersEventKind {
			continue
		}
		var batch btplugin.TransfersEvent
		if err := json.Unmarshal(e.Body, &batch); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if batch.Version != btplugin.TransfersVersion {
			http.Error(w, fmt.Sprintf("transfers version %d", batch.Version), http.StatusBadRequest)
			return
		}
		l.events++
		for _, ev := range batch.Torrents {
			l.torrents[ev.InfoHash] = ev
			for _, row := range ev.Rows {
				if l.seen[row.Key] {
					l.copies++
					continue
				}
				l.seen[row.Key] = true
				at := row.UserID + ":" + ev.InfoHash
				if old, ok := l.newest[at]; !ok || row.Seq > old.Seq {
					l.newest[at] = row
				}
			}
		}
	}
	w.WriteHeader(http.StatusOK)
}

// Issue 28.2: the site's ledger (a real HTTP receiver behind the signed
// webhook) equals the totals hoard keeps, after frontends that hold the
// feed's rows only in memory (S5) were killed with SIGKILL: one with its
// rows not yet delivered at all, one between appending its batch and
// recording its round, while another frontend answered and fed the same
// torrents. The killed frontends' records are delivered by the other's
// backstop once their heartbeats expired.
func TestFeedSurvivesKilledFrontends(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ledger := &siteLedger{seen: map[string]bool{}, newest: map[string]btplugin.TransferRow{}, torrents: map[string]btplugin.TransferEvent{}}
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		server := &httptest.Server{Listener: listener, Config: &http.Server{Handler: ledger}}
		server.Start()
		t.Cleanup(server.Close)

		ob := outbox.New(b.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
		deliver := btplugin.FeedDeliverer(ob)
		store, err := swarm.New(b.Client, swarm.Config{Private: true, Logger: quiet, OnFeed: deliver})
		require.NoError(t, err)
		t.Cleanup(func() { _ = store.Stop() })
		require.NoError(t, store.AddClient(ctx, "-TR", "Transmission"))
		hashes := feedKillHashes()
		for i, hash := range hashes {
			require.NoError(t, store.RegisterTorrent(ctx, hash, fmt.Sprintf("%d", 100+i)))
		}
		for _, u := range feedKillUsers {
			require.NoError(t, store.AddUser(ctx, "feedpasskey000000000000000000"+u+"x", u))
		}
		require.NoError(t, store.SetTorrentCredit(ctx, hashes[1], swarm.Credit{Kind: swarm.CreditFreeleech}))
		step := 0
		announceAll := func() {
			step++
			require.NoError(t, feedAnnounceAll(ctx, store, step))
		}
		// killChild has a child frontend answer the next step and be
		// killed in mode; then the backstop of this frontend delivers
		// its records once its heartbeat expired, and it leaves the
		// registry.
		killChild := func(mode, says string) {
			step++
			child := exec.Command(os.Args[0], "-test.run=^$")
			child.Env = append(os.Environ(), "FEED_CHILD_REDIS="+b.URL, "FEED_CHILD_STEP="+strconv.Itoa(step),
				"FEED_CHILD_MODE="+mode)
			child.Stderr = os.Stderr
			out, err := child.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, child.Start())
			said := make(chan string, 1)
			go func() {
				line, _ := bufio.NewReader(out).ReadString('\n')
				said <- line
			}()
			select {
			case line := <-said:
				require.Equal(t, says+"\n", line)
			case <-time.After(60 * time.Second):
				_ = child.Process.Kill()
				t.Fatal("the feed child never said", says)
			}
			require.NoError(t, child.Process.Signal(syscall.SIGKILL))
			_ = child.Wait()
			others := func() int {
				all, err := b.Client.HGetAll(ctx, btstore.FrontendsKey).Result()
				require.NoError(t, err)
				delete(all, store.Owner())
				return len(all)
			}
			require.Equal(t, 1, others(), "the killed frontend is registered")
			require.Eventually(t, func() bool {
				_, err := store.FeedDeadWriters(ctx, deliver)
				require.NoError(t, err)
				return others() == 0
			}, 30*time.Second, 50*time.Millisecond, "the backstop delivered the killed frontend's records")
		}

		announceAll()
		announceAll()
		_, err = store.FeedRound(ctx, deliver)
		require.NoError(t, err)
		killChild("held", "answered") // every row only in its memory
		killChild("midflush", "delivered")
		for range 2 {
			announceAll()
			_, err := store.FeedRound(ctx, deliver)
			require.NoError(t, err)
		}
		rows, err := store.FeedRound(ctx, deliver)
		require.NoError(t, err)
		require.Zero(t, rows, "nothing left held")
		for _, hash := range hashes {
			require.Zero(t, b.Client.Exists(ctx, btstore.FeedRowsKey(hash)).Val(), "no feed row in Redis")
		}

		_, policy, err := outbox.ParseSettings([]byte(fmt.Sprintf(
			`{"webhook_url":%q,"webhook_secret":%q,"allow_private_targets":true,"batch_size":50}`, server.URL+"/hook", feedSecret)))
		require.NoError(t, err)
		sender := outbox.New(b.Client, outbox.Config{Policy: policy, Logger: quiet})
		for {
			round, err := sender.DeliverOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, round.Failed)
			if round.Taken == 0 {
				break
			}
		}

		ledger.mu.Lock()
		defer ledger.mu.Unlock()
		for _, hash := range hashes {
			for _, u := range feedKillUsers {
				want, err := store.UserOnTorrent(ctx, hash, u)
				require.NoError(t, err)
				got, ok := ledger.newest[u+":"+btstore.HexInfoHash(hash)]
				require.True(t, ok, u)
				require.Equal(t, want.Seq, got.Seq, u)
				require.Equal(t, want.Uploaded, got.Uploaded, u)
				require.Equal(t, want.Downloaded, got.Downloaded, u)
				require.Equal(t, want.UpCredited, got.UpCredited, u)
				require.Equal(t, want.DownCredited, got.DownCredited, u)
			}
			info, err := store.Torrent(ctx, hash)
			require.NoError(t, err)
			ev := ledger.torrents[btstore.HexInfoHash(hash)]
			require.Equal(t, info.Leechers, ev.Leechers)
			require.Equal(t, info.ID, ev.TorrentID)
		}
		require.Zero(t, ledger.newest["11:"+btstore.HexInfoHash(hashes[1])].DownCredited, "freeleech")
		// The mid-flush frontend's rows came again from the backstop: the
		// outbox dropped the copies of an event of the same rows (one
		// Redis: the backstop's scan batch is the child's), the site those
		// in events grouped otherwise (a cluster's scan goes by master).
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Positive(t, counts.Duplicates+int64(ledger.copies), "the killed frontend's rows came again, dropped by key")
		// Every seq of every record reached the site: the killed
		// frontends' steps too, not only their newest rows.
		require.Len(t, ledger.seen, len(hashes)*len(feedKillUsers)*step-len(hashes)*len(feedKillUsers),
			"one row per change (the start moves no fed figure)")
	})
}

func TestTheDocumentedTransfersEventIsOneThePluginSends(t *testing.T) {
	ev := documentedEvent(t, "**What is sent.**")
	require.Equal(t, btplugin.TransfersEventKind, ev.Kind)
	var body btplugin.TransfersEvent
	dec := json.NewDecoder(bytes.NewReader(ev.Body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body))
	require.Equal(t, btplugin.TransfersVersion, body.Version)
	require.Len(t, body.Torrents, 2, "the example shows two torrents in one event")
	digest := sha1.New()
	rows := 0
	for _, torrent := range body.Torrents {
		for _, row := range torrent.Rows {
			require.Equal(t, row.UserID+":"+torrent.InfoHash+":"+strconv.FormatInt(row.Seq, 10), row.Key)
			digest.Write([]byte(row.Key + "\n"))
			rows++
		}
	}
	require.Equal(t, "transfers:"+strconv.Itoa(rows)+":"+hex.EncodeToString(digest.Sum(nil)[:8]), ev.Key)
	again, err := json.Marshal(body)
	require.NoError(t, err)
	require.JSONEq(t, string(ev.Body), string(again), "the plugin marshals the same body")
}

// A round's rows go in few transfers events, each under the outbox's
// body bound, every row exactly once; the same rows offered again in
// another order make the same events, which the outbox drops.
func TestTransfersEventsCarryManyTorrents(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := outbox.New(b.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
		deliver := btplugin.FeedDeliverer(ob)
		var batches []swarm.FeedBatch
		want := map[string]int64{} // row key -> uploaded
		for i := range 300 {
			hash := bittorrent.InfoHash(sha1.Sum([]byte(fmt.Sprintf("transfers-%d", i))))
			batch := swarm.FeedBatch{InfoHash: hash, TorrentID: strconv.Itoa(i), Seeders: int64(i % 7), Announced: 1_800_000_000_000}
			users := 1 + i%3
			if i == 0 {
				users = 250 // more rows than one event holds
			}
			for u := range users {
				row := swarm.FeedRow{UserID: strconv.Itoa(1000 + u), Seq: int64(i + u + 1), Uploaded: int64(i*1000 + u), Downloaded: int64(u)}
				batch.Rows = append(batch.Rows, row)
				want[swarm.FeedKey(row.UserID, hash, row.Seq)] = row.Uploaded
			}
			batches = append(batches, batch)
		}
		require.NoError(t, deliver(ctx, batches))

		events, _, err := ob.Pending(ctx, 0, outbox.MaxListLimit)
		require.NoError(t, err)
		got := map[string]int64{}
		for _, e := range events {
			require.Equal(t, btplugin.TransfersEventKind, e.Kind)
			require.LessOrEqual(t, len(e.Body), outbox.MaxBodyBytes)
			var body btplugin.TransfersEvent
			require.NoError(t, json.Unmarshal(e.Body, &body))
			require.Equal(t, btplugin.TransfersVersion, body.Version)
			for _, torrent := range body.Torrents {
				require.NotEmpty(t, torrent.Rows)
				for _, row := range torrent.Rows {
					_, dup := got[row.Key]
					require.False(t, dup, row.Key)
					got[row.Key] = row.Uploaded
				}
			}
		}
		require.Equal(t, want, got, "every row once, with its figures")
		require.Less(t, len(events), 30, "%d rows of 300 torrents in %d events", len(want), len(events))

		reversed := make([]swarm.FeedBatch, len(batches))
		for i, batch := range batches {
			reversed[len(batches)-1-i] = batch
		}
		require.NoError(t, deliver(ctx, reversed))
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(len(events)), counts.Duplicates, "the same rows made the same events")
	})
}

// A snatched user's row carries the snatch in every round after it; the
// snatch event goes to the outbox once per frontend, not with each row
// (each copy cost the outbox a dedup look-up to drop it), and the site
// gets it once either way.
func TestSnatchEventIsAppendedOncePerFrontend(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := outbox.New(b.Client, outbox.Config{Policy: outbox.DefaultPolicy(), Logger: quiet})
		hash := bittorrent.InfoHash(sha1.Sum([]byte("snatch-once")))
		round := func(deliver func(context.Context, []swarm.FeedBatch) error, seq int64) {
			require.NoError(t, deliver(ctx, []swarm.FeedBatch{{InfoHash: hash, TorrentID: "5", Snatches: 1,
				Rows: []swarm.FeedRow{{UserID: "7", Seq: seq, Uploaded: seq * 100, Snatched: 1_800_000_000_000}}}}))
		}
		first := btplugin.FeedDeliverer(ob)
		round(first, 1)
		round(first, 2)
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), counts.Appended, "two transfers events and one snatch")
		require.Zero(t, counts.Duplicates, "the second round left the snatch's copy out")

		round(btplugin.FeedDeliverer(ob), 3) // another frontend sends its copy once
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), counts.Appended)
		require.Equal(t, int64(1), counts.Duplicates, "the outbox dropped the other frontend's copy")

		events, _, err := ob.Pending(ctx, 0, outbox.MaxListLimit)
		require.NoError(t, err)
		snatches := 0
		for _, e := range events {
			if e.Kind == btplugin.SnatchEventKind {
				snatches++
				require.Equal(t, "snatch:7:"+btstore.HexInfoHash(hash), e.Key)
			}
		}
		require.Equal(t, 1, snatches)
	})
}
