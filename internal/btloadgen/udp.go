package btloadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// connIDMaxAge is how long a worker reuses a connection id; BEP 15 says a
// client may for one minute.
const connIDMaxAge = time.Minute

func (r *run) udpWorker(ctx context.Context, rng *rand.Rand, stats *workerStats) {
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.target))
	if err != nil {
		for r.next(ctx) {
			stats.fail(ctx, err)
		}
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	c := &udpConn{conn: conn, in: make([]byte, 4096), out: make([]byte, 0, 2048), rng: rng}
	peerSize := 6
	if !r.target.Addr().Is4() {
		peerSize = 18
	}
	var connID uint64
	var connAt time.Time
	for r.next(ctx) {
		a := r.pick(rng)
		start := time.Now()
		if connID == 0 || start.Sub(connAt) > connIDMaxAge {
			resp, err := c.roundTrip(&wire.UDPRequest{Action: wire.ActionConnect}, r.cfg.Timeout)
			if err == nil && resp.Action != wire.ActionConnect {
				err = fmt.Errorf("connect: unexpected action %d %q", resp.Action, resp.Message)
			}
			if err != nil {
				stats.fail(ctx, err)
				continue
			}
			connID, connAt = resp.ConnectionID, time.Now()
		}
		req := wire.UDPRequest{
			ConnectionID: connID, Action: wire.ActionAnnounce,
			InfoHash: a.infoHash, PeerID: a.peerID, Left: a.left,
			Uploaded: a.uploaded, Downloaded: a.downloaded,
			Key: a.key, NumWant: int32(r.cfg.NumWant), Port: a.port, Event: a.event,
		}
		if a.path != "" {
			req.URLData = []byte(a.path)
		}
		resp, err := c.roundTrip(&req, r.cfg.Timeout)
		if err == nil && resp.Action != wire.ActionAnnounce {
			err = fmt.Errorf("announce: action %d %q", resp.Action, resp.Message)
			connID = 0 // maybe an expired id: connect again
		}
		if err != nil {
			stats.fail(ctx, err)
			continue
		}
		stats.ok(time.Since(start), len(resp.Peers)/peerSize)
	}
}

type udpConn struct {
	conn *net.UDPConn
	in   []byte
	out  []byte
	rng  *rand.Rand
	resp wire.UDPResponse
}

var errUDPTimeout = errors.New("no reply before the timeout")

// roundTrip sends req with a fresh transaction id and waits for the reply
// carrying it, skipping late replies to earlier requests.
func (c *udpConn) roundTrip(req *wire.UDPRequest, timeout time.Duration) (*wire.UDPResponse, error) {
	req.TransactionID = c.rng.Uint32()
	c.out = wire.AppendUDPRequest(c.out[:0], req)
	if err := c.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	if _, err := c.conn.Write(c.out); err != nil {
		return nil, err
	}
	for {
		n, err := c.conn.Read(c.in)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, errUDPTimeout
			}
			return nil, err
		}
		if err := wire.ParseUDPResponse(c.in[:n], &c.resp); err != nil {
			continue
		}
		if c.resp.TransactionID == req.TransactionID {
			return &c.resp, nil
		}
	}
}
