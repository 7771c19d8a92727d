package outbox_test

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// TestAppendStoresABatchOnceAndInOrder: a batch is stored whole, a key
// seen within the window (or twice in one batch) is stored once, and a
// batch with one bad event stores nothing.
func TestAppendStoresABatchOnceAndInOrder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		ob := newOutbox(t, b, policy(t, `{"dedup_window":"1h"}`), clk)

		batch := append(events("a", 3), events("a", 1)...) // a-0 twice in one batch
		ids, err := ob.AppendIDs(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, []uint64{1, 2, 3}, ids)
		ids, err = ob.AppendIDs(ctx, append(events("a", 2), events("b", 1)...)) // a-0, a-1 seen
		require.NoError(t, err)
		require.Equal(t, []uint64{4}, ids)

		bad := append(events("c", 2), outbox.Event{Key: "c-bad", Kind: "x", Body: json.RawMessage(`{not json`)})
		require.ErrorIs(t, ob.Append(ctx, bad), outbox.ErrInvalid)
		require.ErrorIs(t, ob.Append(ctx, []outbox.Event{{Key: "", Kind: "x"}}), outbox.ErrInvalid)
		require.ErrorIs(t, ob.Append(ctx, []outbox.Event{{Key: "k", Kind: ""}}), outbox.ErrInvalid)

		pending, next, err := ob.Pending(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, pending, 4)
		require.Equal(t, uint64(4), next)
		require.Equal(t, "b-0", pending[3].Key)
		require.JSONEq(t, `{"user":"u0","torrents":[0]}`, string(pending[0].Body))
		require.Equal(t, clk.Now().UTC(), pending[0].At)
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), counts.Pending)
		require.Equal(t, int64(4), counts.Appended)
		require.Equal(t, int64(3), counts.Duplicates)

		// Past the window the key is forgotten: the same key is a new event.
		clk.Advance(time.Hour + time.Millisecond)
		ids, err = ob.AppendIDs(ctx, events("a", 1))
		require.NoError(t, err)
		require.Equal(t, []uint64{5}, ids)
	})
}

// TestAppendsReusingRecordBuffersStoreEachBodyAsGiven: an append's
// record buffers serve the next appends (a long body's buffer then holds
// a short one, a failed append's are taken back too), and every event is
// stored with its own body, none with another's bytes.
func TestAppendsReusingRecordBuffersStoreEachBodyAsGiven(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := newOutbox(t, b, policy(t, `{"dedup_window":"1h"}`), clock.NewFake(start()))
		var want []string
		for round, size := range []int{3000, 10, 2000, 1, 40, 3000} {
			var batch []outbox.Event
			for i := range 3 {
				body := fmt.Sprintf(`{"round":%d,"event":%d,"pad":"%s"}`, round, i, strings.Repeat(string(rune('a'+round)), size+i))
				batch = append(batch, outbox.Event{Key: fmt.Sprint("r", round, "-", i), Kind: "x", Body: json.RawMessage(body)})
				want = append(want, body)
			}
			require.NoError(t, ob.Append(ctx, batch))
			bad := []outbox.Event{{Key: "ok", Kind: "x", Body: json.RawMessage(`{"long":"` + strings.Repeat("z", 5000) + `"}`)},
				{Key: "bad", Kind: "x", Body: json.RawMessage(`{not json`)}}
			require.ErrorIs(t, ob.Append(ctx, bad), outbox.ErrInvalid)
		}
		pending, _, err := ob.Pending(ctx, 0, 100)
		require.NoError(t, err)
		require.Len(t, pending, len(want))
		for i, e := range pending {
			require.Equal(t, want[i], string(e.Body), "event %d", i)
		}
	})
}

// TestAppendRefusesPastMaxPendingAndDedupIsBounded: max_pending refuses
// a whole batch (nothing dropped, nothing stored) and the dedup record
// keeps at most dedup_max keys.
func TestAppendRefusesPastMaxPendingAndDedupIsBounded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := newOutbox(t, b, policy(t, `{"max_pending":5,"dedup_max":4}`), clock.NewFake(start()))
		require.NoError(t, ob.Append(ctx, events("a", 4)))
		require.ErrorIs(t, ob.Append(ctx, events("b", 2)), outbox.ErrFull)
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), counts.Pending)
		require.NoError(t, ob.Append(ctx, events("b", 1)))
		n, err := b.Client.ZCard(ctx, btstore.OutboxDedupKey()).Result()
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
	})
}

// TestWebhookThatFailsHangsThenRecoversGetsEveryEventOnce: a real
// receiver answers 500 twice, then hangs past the timeout, then
// recovers. Every event arrives, each is accepted exactly once, every
// request's signature verifies, and the waits grow as the backoff says.
func TestWebhookThatFailsHangsThenRecoversGetsEveryEventOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		rcv := newReceiver(t, clk.Now, func(n int) int {
			switch n {
			case 1, 2:
				return http.StatusInternalServerError
			case 3:
				return hang
			}
			return http.StatusNoContent
		})
		p := webhookPolicy(t, rcv.url(), `,"timeout":"200ms","backoff":"1s","max_backoff":"3s","batch_size":10`)
		ob := newOutbox(t, b, p, clk)
		all := events("ev", 25)
		require.NoError(t, ob.Append(ctx, all))

		// First request: 500. The events wait a full backoff (jitter 1).
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Taken: 10, Failed: 10}, round)
		pending, _, err := ob.Pending(ctx, 0, 1)
		require.NoError(t, err)
		require.Equal(t, 1, pending[0].Attempts)
		require.Contains(t, pending[0].LastError, "500")
		// The other 15 are due: they go in the next request (500 again).
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 10, round.Failed)
		round, err = ob.DeliverOnce(ctx) // the last 5: the receiver hangs
		require.NoError(t, err)
		require.Equal(t, 5, round.Failed)
		pending, _, err = ob.Pending(ctx, 0, 100)
		require.NoError(t, err)
		timedOut := 0
		for _, e := range pending {
			if strings.Contains(e.LastError, "no answer within the timeout") {
				timedOut++
			}
		}
		require.Equal(t, 5, timedOut)
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, round.Taken, "nothing is due before its backoff ends")
		clk.Advance(time.Second - time.Millisecond)
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, round.Taken, "the first backoff is the whole second")
		clk.Advance(time.Millisecond)
		for range 10 {
			round, err := ob.DeliverOnce(ctx)
			require.NoError(t, err)
			if round.Taken == 0 {
				clk.Advance(3 * time.Second)
			}
		}
		received, accepted, _, badSigs := rcv.snapshot()
		require.Zero(t, badSigs)
		require.Len(t, accepted, len(all))
		for _, e := range all {
			require.Equal(t, 1, accepted[e.Key], e.Key)
			require.GreaterOrEqual(t, received[e.Key], 2, e.Key)
		}
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Counts{Pending: 0, Kept: 25, Appended: 25, Attempts: 50, Failures: 25, Delivered: 25}, counts)
	})
}

// TestSignatureVerifiesOnlyWithTheSecretAndInTime: the header format,
// checked the way a site would: right secret passes; a wrong secret, a
// changed body, an old timestamp or a garbled header fail.
func TestSignatureVerifiesOnlyWithTheSecretAndInTime(t *testing.T) {
	now := time.Unix(1_772_366_400, 0)
	body := []byte(`{"events":[]}`)
	header := outbox.Sign([]byte(testSecret), now, body)
	require.Regexp(t, `^t=1772366400,v1=[0-9a-f]{64}$`, header)
	require.NoError(t, outbox.VerifySignature([]byte(testSecret), header, body, now.Add(time.Minute), outbox.DefaultTolerance))
	require.ErrorIs(t, outbox.VerifySignature([]byte("another-secret-of-length"), header, body, now, outbox.DefaultTolerance), outbox.ErrSignature)
	require.ErrorIs(t, outbox.VerifySignature([]byte(testSecret), header, []byte(`{"events":[{}]}`), now, outbox.DefaultTolerance), outbox.ErrSignature)
	require.ErrorIs(t, outbox.VerifySignature([]byte(testSecret), header, body, now.Add(6*time.Minute), outbox.DefaultTolerance), outbox.ErrSignature)
	for _, bad := range []string{"", "t=1772366400", "v1=00", "t=x,v1=" + header[len(header)-64:], "t=1772366400;v1=ab", "t=-5,v1=" + header[len(header)-64:]} {
		require.ErrorIs(t, outbox.VerifySignature([]byte(testSecret), bad, body, now, outbox.DefaultTolerance), outbox.ErrSignature, bad)
	}
}

// TestAWrongSecretIsRefusedByTheReceiverAndRetried: a deliverer signing
// with another secret is refused (401) by a verifying receiver; its
// events stay pending, and with the right secret they arrive.
func TestAWrongSecretIsRefusedByTheReceiverAndRetried(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		rcv := newReceiver(t, clk.Now, func(int) int { return http.StatusOK })
		wrong := webhookPolicy(t, rcv.url(), "")
		wrong.Secret = outbox.Secret("not-the-site-secret-at-all")
		ob := newOutbox(t, b, wrong, clk)
		require.NoError(t, ob.Append(ctx, events("s", 3)))
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, round.Failed)
		_, accepted, _, badSigs := rcv.snapshot()
		require.Equal(t, 1, badSigs)
		require.Empty(t, accepted)

		clk.Advance(time.Hour)
		right := newOutbox(t, b, webhookPolicy(t, rcv.url(), ""), clk)
		round, err = right.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, round.Delivered)
	})
}

// TestKilledDelivererLosesNothing: a deliverer process is SIGKILLed
// after its POST reached the site and before it recorded the delivery.
// Its events stay leased (a second frontend does not take them), and
// once the lease ends they are delivered again: none lost.
func TestKilledDelivererLosesNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		var mu sync.Mutex
		firstHangs := true
		rcv := newReceiver(t, time.Now, func(int) int {
			mu.Lock()
			defer mu.Unlock()
			if firstHangs {
				firstHangs = false
				return hang
			}
			return http.StatusOK
		})
		appender := newOutbox(t, b, policy(t, `{}`), clock.System{})
		all := events("k", 7)
		require.NoError(t, appender.Append(ctx, all))

		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), "OUTBOX_CHILD_REDIS="+b.URL, "OUTBOX_CHILD_WEBHOOK="+rcv.url(),
			"OUTBOX_CHILD_SECRET="+testSecret)
		child.Stderr = os.Stderr
		require.NoError(t, child.Start())
		select {
		case <-rcv.firstSeen:
		case <-time.After(30 * time.Second):
			_ = child.Process.Kill()
			t.Fatal("the child deliverer never sent its request")
		}
		require.NoError(t, child.Process.Signal(syscall.SIGKILL))
		_ = child.Wait()
		received, accepted, _, _ := rcv.snapshot()
		require.Len(t, received, len(all), "the killed deliverer's request carried every event")
		require.Empty(t, accepted)

		killedAt := time.Now()
		p := webhookPolicy(t, rcv.url(), `,"timeout":"1m"`)
		clk := clock.NewFake(killedAt)
		other := newOutbox(t, b, p, clk)
		round, err := other.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, round.Taken, "the killed deliverer's lease still holds")
		counts, err := other.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(len(all)), counts.Pending)

		clk.Advance(p.Lease() + time.Second)
		round, err = other.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Taken: len(all), Delivered: len(all)}, round)
		received, accepted, _, _ = rcv.snapshot()
		for _, e := range all {
			require.Equal(t, 1, accepted[e.Key], e.Key)
			require.Equal(t, 2, received[e.Key], e.Key)
		}
		counts, err = other.Counts(ctx)
		require.NoError(t, err)
		require.Zero(t, counts.Pending)
		require.Equal(t, int64(len(all)), counts.Delivered)
	})
}

// TestSeveralDeliverersAtOnceLoseNothing: three frontends deliver the
// same outbox at once (system clock) to a receiver that fails every
// third request, while events are appended from several goroutines.
// Every event is accepted; duplicates are possible, losses are not.
func TestSeveralDeliverersAtOnceLoseNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		rcv := newReceiver(t, time.Now, func(n int) int {
			if n%3 == 0 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		})
		p := webhookPolicy(t, rcv.url(), `,"timeout":"5s","backoff":"5ms","max_backoff":"20ms","poll":"10ms","batch_size":7,"max_attempts":100`)
		for i := range 3 {
			ob := outbox.New(b.Client, outbox.Config{Policy: p, Logger: quiet, Name: string(rune('a' + i))})
			require.NoError(t, ob.Start(ctx))
			t.Cleanup(ob.Stop)
		}
		appender := newOutbox(t, b, p, clock.System{})
		var wg sync.WaitGroup
		var all []outbox.Event
		for g := range 4 {
			batch := events(string(rune('p'+g)), 50)
			all = append(all, batch...)
			wg.Go(func() {
				for i := 0; i < len(batch); i += 10 {
					require.NoError(t, appender.Append(ctx, batch[i:i+10]))
				}
			})
		}
		wg.Wait()
		require.Eventually(t, func() bool {
			counts, err := appender.Counts(ctx)
			return err == nil && counts.Pending == 0
		}, 30*time.Second, 20*time.Millisecond)
		_, accepted, requests, badSigs := rcv.snapshot()
		require.Zero(t, badSigs)
		require.Len(t, accepted, len(all))
		for _, e := range all {
			require.GreaterOrEqual(t, accepted[e.Key], 1, e.Key)
		}
		counts, err := appender.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(len(all)), counts.Delivered)
		require.Zero(t, counts.Dead)
		require.Positive(t, counts.Failures)
		t.Logf("%d events, %d requests, %d failed attempts", len(all), requests, counts.Failures)
	})
}

// TestDeliveredAreTrimmedAndDeadAreKeptCountedAndRetryable: delivered
// records beyond keep_delivered are deleted; events that fail
// max_attempts times are kept in the dead set with their last error,
// counted, and an operator's retry delivers them.
func TestDeliveredAreTrimmedAndDeadAreKeptCountedAndRetryable(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		var mu sync.Mutex
		status := http.StatusOK
		rcv := newReceiver(t, clk.Now, func(int) int {
			mu.Lock()
			defer mu.Unlock()
			return status
		})
		ob := newOutbox(t, b, webhookPolicy(t, rcv.url(), `,"keep_delivered":5,"max_attempts":2,"batch_size":4`), clk)
		require.NoError(t, ob.Append(ctx, events("d", 12)))
		for range 3 {
			round, err := ob.DeliverOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 4, round.Delivered)
		}
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(12), counts.Delivered)
		require.Equal(t, int64(5), counts.Kept)
		records, err := b.Client.HLen(ctx, btstore.OutboxEventsKey()).Result()
		require.NoError(t, err)
		require.Equal(t, int64(5), records, "only the kept delivered records stay")

		mu.Lock()
		status = http.StatusBadGateway
		mu.Unlock()
		require.NoError(t, ob.Append(ctx, events("x", 3)))
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Taken: 3, Failed: 3}, round)
		clk.Advance(time.Hour)
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Taken: 3, Failed: 3, Died: 3}, round)
		clk.Advance(time.Hour)
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, round.Taken, "dead events are not tried again by themselves")
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), counts.Dead)
		require.Equal(t, int64(3), counts.Died)
		require.Zero(t, counts.Pending)
		dead, next, err := ob.Dead(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, dead, 3)
		require.Equal(t, "x-0", dead[0].Key)
		require.Equal(t, uint64(15), next)
		require.Contains(t, dead[0].LastError, "502")

		// Retrying an id that is not dead changes nothing.
		_, err = ob.RetryDead(ctx, []uint64{dead[0].ID, 1})
		require.ErrorIs(t, err, outbox.ErrUnknown)
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), counts.Dead)

		mu.Lock()
		status = http.StatusOK
		mu.Unlock()
		n, err := ob.RetryDead(ctx, []uint64{dead[0].ID})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = ob.RetryAllDead(ctx, 100)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		round, err = ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, round.Delivered)
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Zero(t, counts.Dead)
		require.Equal(t, int64(3), counts.Retried)
		require.Equal(t, int64(15), counts.Delivered)
	})
}

// TestAKilledLastAttemptGoesDead: an event whose last allowed attempt
// never answered (its deliverer died) is moved to the dead set when the
// lease ends, not tried past max_attempts.
func TestAKilledLastAttemptGoesDead(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := clock.NewFake(start())
		rcv := newReceiver(t, clk.Now, func(int) int { return hang })
		p := webhookPolicy(t, rcv.url(), `,"max_attempts":1,"timeout":"1m"`)
		ob := newOutbox(t, b, p, clk)
		require.NoError(t, ob.Append(ctx, events("z", 2)))
		// The deliverer stops while its request is out: it took the
		// events and never recorded an outcome.
		stopping, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := ob.DeliverOnce(stopping)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counts.Pending)
		require.Zero(t, counts.Failures, "a deliverer that stops blames nobody")
		clk.Advance(p.Lease() + time.Millisecond)
		round, err := ob.DeliverOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Round{Died: 2}, round)
		_, err = ob.Ack(ctx, []uint64{1})
		require.ErrorIs(t, err, outbox.ErrDead, "a dead event is retried, not acknowledged")
		dead, _, err := ob.Dead(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, dead, 2)
		require.Contains(t, dead[0].LastError, "lease")
	})
}

// TestPollReadsAfterACursorAndAcksStrictly: a polling site pages through
// pending events with a cursor and acknowledges them; an id never given
// refuses the whole ack and changes nothing, and an ack retried after a
// timeout succeeds again, changing nothing for the ids delivered before
// (even once their records were trimmed).
func TestPollReadsAfterACursorAndAcksStrictly(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		ob := newOutbox(t, b, policy(t, `{"keep_delivered":2}`), clock.NewFake(start()))
		require.NoError(t, ob.Append(ctx, events("p", 5)))
		page, next, err := ob.Pending(ctx, 0, 2)
		require.NoError(t, err)
		require.Equal(t, []string{"p-0", "p-1"}, []string{page[0].Key, page[1].Key})
		require.Equal(t, uint64(2), next)
		page, next, err = ob.Pending(ctx, next, 10)
		require.NoError(t, err)
		require.Len(t, page, 3)
		require.Equal(t, uint64(5), next)
		page, again, err := ob.Pending(ctx, next, 10)
		require.NoError(t, err)
		require.Empty(t, page)
		require.Equal(t, next, again)

		acked, err := ob.Ack(ctx, []uint64{1, 2})
		require.NoError(t, err)
		require.Equal(t, outbox.Acked{Now: 2}, acked)
		for _, ids := range [][]uint64{{3, 99}, {6}, {2, 6}} {
			_, err = ob.Ack(ctx, ids)
			require.ErrorIs(t, err, outbox.ErrUnknown, "%v: 6 and 99 were never given", ids)
		}
		counts, err := ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), counts.Pending, "a refused ack changed nothing")
		require.Equal(t, int64(2), counts.Delivered)
		acked, err = ob.Ack(ctx, []uint64{1, 2})
		require.NoError(t, err, "an ack retried after a timeout succeeds")
		require.Equal(t, outbox.Acked{Already: 2}, acked)
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counts.Delivered, "a retried ack counts nothing twice")
		_, err = ob.Ack(ctx, nil)
		require.ErrorIs(t, err, outbox.ErrInvalid)
		_, _, err = ob.Pending(ctx, 0, 0)
		require.ErrorIs(t, err, outbox.ErrInvalid)
		_, _, err = ob.Pending(ctx, 0, outbox.MaxListLimit+1)
		require.ErrorIs(t, err, outbox.ErrInvalid)
		acked, err = ob.Ack(ctx, []uint64{3, 4, 5})
		require.NoError(t, err)
		require.Equal(t, outbox.Acked{Now: 3}, acked)
		counts, err = ob.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.Counts{Kept: 2, Appended: 5, Delivered: 5}, counts)
		// keep_delivered is 2: the records of 1 to 3 are trimmed, and their
		// ack is still a success.
		acked, err = ob.Ack(ctx, []uint64{1, 5})
		require.NoError(t, err)
		require.Equal(t, outbox.Acked{Already: 2}, acked)
	})
}

// TestParseCursorAndIDs: the poll cursor and ack ids accept plain
// decimal ids only, with the reason in the error.
func TestParseCursorAndIDs(t *testing.T) {
	for text, want := range map[string]uint64{"": 0, "1": 1, "18446744073709551615": 1<<64 - 1} {
		got, err := outbox.ParseCursor(text)
		require.NoError(t, err, text)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"0", "-1", "+1", " 1", "1 ", "0x10", "1e3", "18446744073709551616", "abc", "1-0", "１"} {
		_, err := outbox.ParseCursor(bad)
		require.ErrorIs(t, err, outbox.ErrInvalid, bad)
		require.ErrorContains(t, err, "cursor")
	}
	ids, err := outbox.ParseIDs([]string{"3", "17"})
	require.NoError(t, err)
	require.Equal(t, []uint64{3, 17}, ids)
	for _, bad := range [][]string{nil, {}, {"1", "x"}, {"0"}} {
		_, err := outbox.ParseIDs(bad)
		require.ErrorIs(t, err, outbox.ErrInvalid)
	}
}

// TestBackoffDoublesUpToTheCapWithJitter: the exact waits.
func TestBackoffDoublesUpToTheCapWithJitter(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 60: 10 * time.Second} {
		require.Equal(t, want, outbox.Backoff(time.Second, 10*time.Second, attempt, 1), attempt)
		require.Equal(t, want/2, outbox.Backoff(time.Second, 10*time.Second, attempt, 0), attempt)
	}
}

// TestSettingsRefuseBadInput: each bad setting is named in the error.
func TestSettingsRefuseBadInput(t *testing.T) {
	secretFile := t.TempDir() + "/secret"
	require.NoError(t, os.WriteFile(secretFile, []byte(testSecret+"\n"), 0o600))
	t.Setenv("OUTBOX_TEST_SECRET", testSecret)
	for _, ok := range []string{
		`{}`, `null`,
		`{"webhook_url":"https://site.example/hook","webhook_secret":"` + testSecret + `"}`,
		`{"webhook_url":"http://127.0.0.1:8080/hook?x=1","webhook_secret_file":"` + secretFile + `","allow_private_targets":true}`,
		`{"webhook_url":"http://[::1]:8080/","webhook_secret_env":"OUTBOX_TEST_SECRET","max_attempts":3,"backoff":"2s","max_backoff":"1m","allowed_targets":["::1"]}`,
		`{"webhook_url":"http://10.1.2.3/","webhook_secret_env":"OUTBOX_TEST_SECRET","allowed_targets":["10.0.0.0/8"]}`,
	} {
		_, p, err := outbox.ParseSettings([]byte(ok))
		require.NoError(t, err, ok)
		if p.WebhookURL != nil {
			require.Equal(t, testSecret, string(p.Secret), "the file's newline is dropped")
		}
	}
	secret := `,"webhook_secret":"` + testSecret + `"`
	for bad, says := range map[string]string{
		`{"webhook_url":"ftp://site.example/hook"` + secret + `}`:                                     "must be an http:// or https:// URL",
		`{"webhook_url":"file:///etc/passwd"` + secret + `}`:                                          "must be an http:// or https:// URL",
		`{"webhook_url":"site.example/hook"` + secret + `}`:                                           "must be an http:// or https:// URL",
		`{"webhook_url":"http:///hook"` + secret + `}`:                                                "has no host",
		`{"webhook_url":"http://h/#x"` + secret + `}`:                                                 "fragment",
		`{"webhook_url":"https://u:pw@h/","webhook_secret":"short"}`:                                  "at least 16 bytes",
		`{"webhook_url":"https://h/"}`:                                                                "needs a secret",
		`{"webhook_secret":"` + testSecret + `"}`:                                                     "without a webhook_url",
		`{"webhook_url":"https://h/","webhook_secret_env":"NOPE_NONE"}`:                               "NOPE_NONE is empty or unset",
		`{"webhook_url":"https://h/","webhook_secret_file":"/nonexistent/x"}`:                         "webhook_secret_file",
		`{"webhook_url":"https://h/","webhook_secret":"` + testSecret + `","webhook_secret_env":"X"}`: "one way",
		`{"max_attempts":-1}`:                 "max_attempts must not be negative",
		`{"keep_delivered":-5}`:               "keep_delivered must not be negative",
		`{"batch_size":-1}`:                   "batch_size must not be negative",
		`{"max_pending":-1}`:                  "max_pending",
		`{"dedup_max":-1}`:                    "dedup_max",
		`{"timeout":"-1s"}`:                   "timeout",
		`{"backoff":"soon"}`:                  "backoff",
		`{"backoff":"1m","max_backoff":"1s"}`: "shorter than backoff",
		`{"webhook":"x"}`:                     "unknown field",
		`{"webhook_url":"http://127.0.0.1:8080/"` + secret + `}`:                               "127.0.0.1 is loopback",
		`{"webhook_url":"http://169.254.169.254/latest/meta-data/"` + secret + `}`:             "169.254.169.254 is link-local",
		`{"webhook_url":"http://localhost:8080/"` + secret + `}`:                               "is loopback",
		`{"webhook_url":"http://[fd00::1]/"` + secret + `}`:                                    "fd00::1 is unique local",
		`{"webhook_url":"http://192.168.1.1/"` + secret + `,"allowed_targets":["10.0.0.0/8"]}`: "192.168.1.1 is private",
		`{"webhook_url":"http://h/"` + secret + `,"allowed_targets":["10.0.0.0/40"]}`:          "allowed target 0",
	} {
		_, _, err := outbox.ParseSettings([]byte(bad))
		require.ErrorContains(t, err, says, bad)
		require.NotContains(t, err.Error(), testSecret, "the secret is never in an error")
		require.NotContains(t, err.Error(), ":pw@", "a password in the URL is never in an error")
	}
}

// TestStartStopAreSafe: Stop before Start, twice, and after Start; a
// stopped deliverer does not start again.
func TestStartStopAreSafe(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		rcv := newReceiver(t, time.Now, func(int) int { return http.StatusOK })
		ob := outbox.New(b.Client, outbox.Config{Policy: webhookPolicy(t, rcv.url(), `,"poll":"10ms"`), Logger: quiet})
		require.NoError(t, ob.Start(context.Background()))
		require.Error(t, ob.Start(context.Background()))
		require.NoError(t, ob.Append(context.Background(), events("w", 2)))
		require.Eventually(t, func() bool {
			_, accepted, _, _ := rcv.snapshot()
			return len(accepted) == 2
		}, 10*time.Second, 10*time.Millisecond, "an append wakes the deliverer")
		ob.Stop()
		ob.Stop()
		require.Error(t, ob.Start(context.Background()))

		idle := outbox.New(b.Client, outbox.Config{Policy: policy(t, `{}`), Logger: quiet})
		idle.Stop()
		idle.Stop()
	})
}

// TestSecretIsNeverFormatted: the secret prints redacted.
func TestSecretIsNeverFormatted(t *testing.T) {
	s := outbox.Secret(testSecret)
	require.Equal(t, "[redacted]", s.String())
	require.Equal(t, "[redacted]", s.LogValue().String())
}

// TestTheDocumentedSignatureExample: the signature docs/bittorrent-reaper.md
// shows, for the body and secret it names, verifies, so a site can check its
// code against it.
func TestTheDocumentedSignatureExample(t *testing.T) {
	const header = "t=1772366400,v1=67b0b4fc8a3f96aaab57934eeec997418547beb4a4c1e8ebc477d85fad2a6b13"
	doc, err := os.ReadFile("../../../docs/bittorrent-reaper.md")
	require.NoError(t, err)
	for _, shown := range []string{"X-Hoard-Signature: " + header, "`{\"events\":[]}`", "`an-example-secret-0123`"} {
		require.Contains(t, string(doc), shown, "the document no longer shows the example this test checks")
	}
	at := time.Unix(1772366400, 0)
	require.Equal(t, header, outbox.Sign([]byte("an-example-secret-0123"), at, []byte(`{"events":[]}`)))
	require.NoError(t, outbox.VerifySignature([]byte("an-example-secret-0123"), header, []byte(`{"events":[]}`), at, outbox.DefaultTolerance))
}

// TestAnAckAnywhereTrimsToThePluginsKeepDelivered: the plugin saves its
// keep_delivered, so an ack through another process (the admin API's
// outbox, on defaults) trims to it.
func TestAnAckAnywhereTrimsToThePluginsKeepDelivered(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		plugin := newOutbox(t, b, policy(t, `{"keep_delivered":2}`), clock.NewFake(start()))
		require.NoError(t, plugin.SaveConfig(ctx))
		admin := newOutbox(t, b, outbox.DefaultPolicy(), clock.NewFake(start()))
		require.NoError(t, admin.Append(ctx, events("t", 6)))
		acked, err := admin.Ack(ctx, []uint64{1, 2, 3, 4, 5, 6})
		require.NoError(t, err)
		require.Equal(t, outbox.Acked{Now: 6}, acked)
		counts, err := admin.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(2), counts.Kept)
		records, err := b.Client.HLen(ctx, btstore.OutboxEventsKey()).Result()
		require.NoError(t, err)
		require.Equal(t, int64(2), records)
	})
}
