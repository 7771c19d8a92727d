package bittorrent

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// BenchmarkUDPSocketAnnounces is announces over real loopback sockets from
// 32 clients, each waiting for its reply as btloadgen's do, answered from
// a fixed swarm, so what is measured is the listener's socket path: one
// datagram per call (batch=1, the path before batching) against batches.
// cpu-µs/op is the whole process's CPU per announce, the clients' share
// the same in both.
func BenchmarkUDPSocketAnnounces(b *testing.B) {
	for _, batch := range []int{1, udpBatch} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			srv, err := NewUDPServer(UDPConfig{Addr4: "127.0.0.1:0", Swarms: newFixedSwarms(), Logger: quietLogger(), Workers: 32})
			if err != nil {
				b.Fatal(err)
			}
			srv.batch = batch
			if err := srv.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			const clients = 32
			conns := make(chan *benchUDPClient, clients)
			for range clients {
				conns <- newBenchUDPClient(b, srv.Addr4())
			}
			b.SetParallelism((clients + 1) / 2)
			before := processCPUTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				c := <-conns
				defer func() { conns <- c }()
				for pb.Next() {
					if err := c.announce(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((processCPUTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
			if reads := srv.reads.Load(); reads > 0 {
				b.ReportMetric(float64(srv.packets.Load())/float64(reads), "packets/read")
			}
		})
	}
}

type benchUDPClient struct {
	conn   *net.UDPConn
	packet []byte
	buf    []byte
}

func newBenchUDPClient(b *testing.B, server string) *benchUDPClient {
	raddr, err := net.ResolveUDPAddr("udp4", server)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := net.DialUDP("udp4", nil, raddr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	c := &benchUDPClient{conn: conn, buf: make([]byte, maxUDPPacket)}
	c.packet = wire.AppendUDPRequest(nil, &wire.UDPRequest{Action: wire.ActionConnect, TransactionID: 1})
	resp, err := c.roundTrip()
	if err != nil {
		b.Fatal(err)
	}
	req := udpAnnounce("", nil)
	req.ConnectionID, req.TransactionID = resp.ConnectionID, 2
	c.packet = wire.AppendUDPRequest(nil, &req)
	return c
}

func (c *benchUDPClient) roundTrip() (wire.UDPResponse, error) {
	var resp wire.UDPResponse
	if _, err := c.conn.Write(c.packet); err != nil {
		return resp, err
	}
	// The deadline only keeps a lost datagram from hanging the benchmark.
	if err := c.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return resp, err
	}
	n, err := c.conn.Read(c.buf)
	if err != nil {
		return resp, err
	}
	return resp, wire.ParseUDPResponse(c.buf[:n], &resp)
}

func (c *benchUDPClient) announce() error {
	resp, err := c.roundTrip()
	if err == nil && resp.Action != wire.ActionAnnounce {
		err = fmt.Errorf("reply action %d: %s", resp.Action, resp.Message)
	}
	return err
}

// processCPUTime is this process's user+system CPU time.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
