package swarm_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/swarm"
)

// frontendProcessEnv names the Redis URL a re-executed test binary
// serves as a frontend process against, for the drift test to SIGKILL.
const frontendProcessEnv = "HOARD_SWARM_FRONTEND_URL"

// frontendCall is one request to a frontend process: an announce
// stamped at Now (ms), a write of its queues (Flush), or its counters.
type frontendCall struct {
	Now   int64
	Flush bool
	Stats bool
	Req   *bittorrent.AnnounceRequest
}

type frontendReply struct {
	Resp  *bittorrent.AnnounceResponse
	Stats swarm.WriteBehindStats
	Err   string
}

// driftConfig is the configuration both of the drift test's frontends
// run with.
func driftConfig(clock swarm.Clock) swarm.Config {
	return swarm.Config{Private: true, Clock: clock, Logger: quietLogger, MaxPeersPerOwner: -1,
		ExternalSweep: true, RepairInterval: -1}
}

// runFrontendProcess is a frontend: a Store on the Redis at url, serving
// frontendCalls on a loopback listener whose address it prints, until it
// is killed. Its clock is moved to each call's time: the parent moves
// time only while no call is in flight, so the calls in flight agree.
func runFrontendProcess(url string) int {
	rdb, err := redisurl.Dial(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "frontend process:", err)
		return 2
	}
	clock := swarm.NewFakeClock(time.UnixMilli(0))
	store, err := swarm.New(rdb, driftConfig(clock))
	if err != nil {
		fmt.Fprintln(os.Stderr, "frontend process:", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "frontend process:", err)
		return 2
	}
	fmt.Println(ln.Addr().String())
	var clockMu sync.Mutex
	setNow := func(ms int64) {
		clockMu.Lock()
		defer clockMu.Unlock()
		if d := ms - clock.Now().UnixMilli(); d > 0 {
			clock.Advance(time.Duration(d) * time.Millisecond)
		}
	}
	ctx := context.Background()
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "frontend process:", err)
			return 2
		}
		go func() {
			defer conn.Close()
			dec, enc := json.NewDecoder(bufio.NewReader(conn)), json.NewEncoder(conn)
			for {
				var call frontendCall
				if dec.Decode(&call) != nil {
					return
				}
				setNow(call.Now)
				var reply frontendReply
				var err error
				switch {
				case call.Flush:
					err = store.Flush(ctx)
				case call.Stats:
					reply.Stats = store.WriteBehindStats()
				default:
					reply.Resp, err = store.Announce(ctx, call.Req)
				}
				if err != nil {
					reply.Err = err.Error()
				}
				if enc.Encode(&reply) != nil {
					return
				}
			}
		}()
	}
}

// frontendProcess is the parent's side of a frontend process, or, with
// local set, a store in the test that a kill abandons (never flushed or
// stopped again, its queue lost as in a kill).
type frontendProcess struct {
	cmd   *exec.Cmd
	addr  string
	local *swarm.Store
}

// inProcessFrontend is a frontend in the test on rdb, killed by
// abandoning it.
func inProcessFrontend(t *testing.T, rdb redis.UniversalClient, clock swarm.Clock) *frontendProcess {
	t.Helper()
	store, err := swarm.New(rdb, driftConfig(clock))
	require.NoError(t, err)
	return &frontendProcess{local: store}
}

// startFrontendProcess starts this test binary again as a frontend
// process on the Redis at url.
func startFrontendProcess(t *testing.T, url string) *frontendProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), frontendProcessEnv+"="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the frontend process prints its address")
	return &frontendProcess{cmd: cmd, addr: line[:len(line)-1]}
}

// kill ends the process with SIGKILL, wherever it is, and waits for it.
func (p *frontendProcess) kill(t *testing.T) {
	t.Helper()
	if p.local != nil {
		return // abandoned
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	err := p.cmd.Wait()
	require.Error(t, err, "the process ends by the signal")
}

// frontendConn is one connection to a frontend process; calls on it go
// one at a time.
type frontendConn struct {
	conn  net.Conn
	enc   *json.Encoder
	dec   *json.Decoder
	local *swarm.Store
}

func (p *frontendProcess) dial(t *testing.T) *frontendConn {
	t.Helper()
	if p.local != nil {
		return &frontendConn{local: p.local}
	}
	conn, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &frontendConn{conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(bufio.NewReader(conn))}
}

// send writes a call without waiting for its reply (for a frontend in
// the test, it drops the call: it is about to be abandoned).
func (c *frontendConn) send(call frontendCall) error {
	if c.local != nil {
		return nil
	}
	return c.enc.Encode(&call)
}

// call sends a call and returns its reply.
func (c *frontendConn) call(call frontendCall) (frontendReply, error) {
	var reply frontendReply
	if c.local != nil {
		var err error
		switch {
		case call.Flush:
			err = c.local.Flush(context.Background())
		case call.Stats:
			reply.Stats = c.local.WriteBehindStats()
		default:
			reply.Resp, err = c.local.Announce(context.Background(), call.Req)
		}
		return reply, err
	}
	if err := c.send(call); err != nil {
		return reply, err
	}
	if err := c.dec.Decode(&reply); err != nil {
		return reply, err
	}
	if reply.Err != "" {
		return reply, fmt.Errorf("frontend process: %s", reply.Err)
	}
	return reply, nil
}
