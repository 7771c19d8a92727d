package bittorrent

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// udpBatch is the most datagrams a reader takes in one read and answers in
// one write: on Linux one recvmmsg and one sendmmsg.
const udpBatch = 16

// batchConn is a UDP socket read and written in batches.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// kernelBatches says whether the kernel has recvmmsg and sendmmsg. x/net
// uses them on Linux only; elsewhere its batch calls move one message,
// and on Windows they are not implemented at all.
var kernelBatches = runtime.GOOS == "linux"

// newBatchConn is conn read and written through x/net where the kernel
// batches (*ipv4.PacketConn and *ipv6.PacketConn share one Message type),
// else one datagram per call.
func newBatchConn(conn *net.UDPConn, network string, batched bool) batchConn {
	switch {
	case !batched:
		return singleConn{conn}
	case network == "udp6":
		return ipv6.NewPacketConn(conn)
	default:
		return ipv4.NewPacketConn(conn)
	}
}

// singleConn is a batchConn moving one datagram per call, with the
// standard library's calls.
type singleConn struct{ conn *net.UDPConn }

func (c singleConn) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	n, from, err := c.conn.ReadFromUDP(ms[0].Buffers[0])
	if err != nil {
		return 0, err
	}
	ms[0].N, ms[0].Addr = n, from
	return 1, nil
}

func (c singleConn) WriteBatch(ms []ipv4.Message, _ int) (int, error) {
	to, ok := ms[0].Addr.(*net.UDPAddr)
	if !ok {
		return 0, errors.New("bittorrent udp: reply to a non-UDP address")
	}
	if _, err := c.conn.WriteToUDP(ms[0].Buffers[0], to); err != nil {
		return 0, err
	}
	return 1, nil
}

// udpReader reads one socket in batches. A store that batches
// (BatchAnnouncer) gets the batch's announces in one call, one round trip;
// otherwise, and for scrapes, the packets that need the store are handled
// concurrently, by the reader and its helpers, since the store pipelines
// concurrent calls into shared round trips. Connects and parse errors cost
// microseconds, so the reader answers them itself rather than waking a
// helper. The batch's replies then go out
// in one write. Everything is allocated once per reader: the only
// allocation per packet is the source address x/net builds on read.
type udpReader struct {
	s     *UDPServer
	conn  batchConn
	in    []ipv4.Message
	out   []ipv4.Message
	slots []udpSlot
	// toStore is the slots of the current batch bound for the store.
	toStore []*udpSlot
	jobs    chan *udpSlot
	pending sync.WaitGroup
	// batcher is the store when it answers a read's announces in one call
	// (and round trip); reqs, batched and results are that call's.
	batcher BatchAnnouncer
	reqs    []*AnnounceRequest
	batched []*udpSlot
	results []AnnounceResult
}

// udpSlot is one packet of a batch and the state that answers it.
type udpSlot struct {
	w      udpWorker
	packet []byte
	from   netip.AddrPort
	reply  []byte
	parsed bool // parse ran: a helper only asks the store
}

// newUDPReader sets up a reader taking up to batch packets a read.
func newUDPReader(s *UDPServer, conn batchConn, batch int) *udpReader {
	r := &udpReader{
		s:       s,
		conn:    conn,
		in:      make([]ipv4.Message, batch),
		out:     make([]ipv4.Message, batch),
		slots:   make([]udpSlot, batch),
		toStore: make([]*udpSlot, 0, batch),
		jobs:    make(chan *udpSlot, batch),
	}
	if b, ok := s.cfg.Swarms.(BatchAnnouncer); ok {
		r.batcher = b
		r.reqs = make([]*AnnounceRequest, 0, batch)
		r.batched = make([]*udpSlot, 0, batch)
		r.results = make([]AnnounceResult, batch)
	}
	for i := range batch {
		r.in[i].Buffers = [][]byte{make([]byte, maxUDPPacket)}
		r.out[i].Buffers = make([][]byte, 1)
		r.slots[i].w = udpWorker{signer: wire.NewConnIDSigner(s.cfg.Secret), out: make([]byte, 0, maxUDPPacket)}
	}
	return r
}

// run reads and answers until the socket is closed. The helpers (one
// fewer than the batch: the reader handles a packet too) stop with it.
func (r *udpReader) run(ctx context.Context) {
	defer r.s.wg.Done()
	for range len(r.slots) - 1 {
		r.s.wg.Add(1)
		go r.help(ctx)
	}
	defer close(r.jobs)
	for {
		n, err := r.conn.ReadBatch(r.in, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient (e.g. ICMP-induced) errors: keep reading.
			r.s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bittorrent udp read", slog.Any("err", err))
			continue
		}
		r.s.reads.Add(1)
		r.s.packets.Add(uint64(n))
		r.answer(ctx, n)
		if !r.write(ctx, n) {
			return
		}
	}
}

func (r *udpReader) help(ctx context.Context) {
	defer r.s.wg.Done()
	for slot := range r.jobs {
		if slot.parsed {
			slot.reply = r.s.scrape(ctx, &slot.w, slot.w.out[:0])
		} else {
			slot.reply = r.s.handle(ctx, &slot.w, slot.packet, slot.from)
		}
		r.pending.Done()
	}
}

// answer fills the replies of the first n slots.
func (r *udpReader) answer(ctx context.Context, n int) {
	r.toStore = r.toStore[:0]
	for i := range n {
		slot, m := &r.slots[i], &r.in[i]
		slot.reply = nil
		addr, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			continue // not a UDP source: nothing to answer
		}
		slot.packet = m.Buffers[0][:m.N]
		slot.from = addr.AddrPort()
		slot.parsed = false
		if goesToStore(slot.packet) {
			r.toStore = append(r.toStore, slot)
			continue
		}
		slot.reply = r.s.handle(ctx, &slot.w, slot.packet, slot.from)
	}
	if len(r.toStore) == 0 {
		return
	}
	if r.batcher != nil {
		r.answerBatched(ctx)
		return
	}
	r.pending.Add(len(r.toStore) - 1)
	for _, slot := range r.toStore[1:] {
		r.jobs <- slot
	}
	first := r.toStore[0]
	first.reply = r.s.handle(ctx, &first.w, first.packet, first.from)
	r.pending.Wait()
}

// answerBatched answers the store-bound slots with one AnnounceBatch call
// for their announces (one round trip to Redis for the read), while the
// helpers answer scrapes, which are rare.
func (r *udpReader) answerBatched(ctx context.Context) {
	r.reqs, r.batched = r.reqs[:0], r.batched[:0]
	for _, slot := range r.toStore {
		reply, toStore := r.s.parse(&slot.w, slot.packet, slot.from)
		switch {
		case !toStore:
			slot.reply = reply
		case slot.w.req.Action == wire.ActionAnnounce:
			r.reqs = append(r.reqs, &slot.w.announce)
			r.batched = append(r.batched, slot)
		default:
			slot.parsed = true
			r.pending.Add(1)
			r.jobs <- slot
		}
	}
	if len(r.reqs) > 0 {
		results := r.results[:len(r.reqs)]
		clear(results)
		r.batcher.AnnounceBatch(ctx, r.reqs, results)
		for i, slot := range r.batched {
			slot.reply = r.s.announced(ctx, &slot.w, results[i].Resp, results[i].Err)
		}
	}
	r.pending.Wait()
}

// goesToStore says whether a packet names an action answered by the store
// (announce, scrape); whether it is well formed is handle's to decide.
func goesToStore(packet []byte) bool {
	if len(packet) < 16 {
		return false
	}
	action := wire.Action(uint32(packet[8])<<24 | uint32(packet[9])<<16 | uint32(packet[10])<<8 | uint32(packet[11]))
	return action == wire.ActionAnnounce || action == wire.ActionScrape
}

// write sends the replies of the first n slots, in as few writes as the
// kernel takes them. A reply the kernel refuses (e.g. no route) is
// dropped, as the client's retry covers a lost datagram. It returns false
// once the socket is closed.
func (r *udpReader) write(ctx context.Context, n int) bool {
	msgs := r.out[:0]
	for i := range n {
		slot := &r.slots[i]
		if slot.reply == nil {
			continue
		}
		msgs = msgs[:len(msgs)+1]
		m := &msgs[len(msgs)-1]
		m.Buffers[0] = slot.reply
		m.Addr = r.in[i].Addr
	}
	for len(msgs) > 0 {
		sent, err := r.conn.WriteBatch(msgs, 0)
		if err == nil && sent > 0 {
			msgs = msgs[sent:]
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return false
		}
		r.s.cfg.Logger.LogAttrs(ctx, slog.LevelDebug, "bittorrent udp write", slog.Any("err", err))
		msgs = msgs[min(max(sent, 0)+1, len(msgs)):]
	}
	return true
}
