// Package opentrackertest runs Debian's opentracker on 127.0.0.1 as an
// external tracker for tests and benchmarks, and announces fake peers to
// it over UDP from other loopback source addresses (127.0.0.2 and up, so
// each peer has its own IP; every packet goes to 127.0.0.1).
package opentrackertest

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// Binary is where Debian installs opentracker.
const Binary = "/usr/bin/opentracker"

// Tracker is a running opentracker.
type Tracker struct {
	// Port is its TCP and UDP port on 127.0.0.1.
	Port int
}

// UDPURL and HTTPURL are its announce URLs.
func (t *Tracker) UDPURL() string  { return "udp://127.0.0.1:" + strconv.Itoa(t.Port) + "/announce" }
func (t *Tracker) HTTPURL() string { return "http://127.0.0.1:" + strconv.Itoa(t.Port) + "/announce" }

// Start runs opentracker whitelisting hashes (Debian builds it in
// whitelist mode) until the test ends. It fails the test, with the reason,
// when the binary is missing.
func Start(tb testing.TB, hashes [][20]byte) *Tracker {
	tb.Helper()
	if _, err := os.Stat(Binary); err != nil {
		tb.Fatalf("opentracker is needed (apt-get install -y opentracker): %v", err)
	}
	dir := tb.TempDir()
	// opentracker chroots to dir and drops to nobody: both must be readable.
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	var wl bytes.Buffer
	for _, h := range hashes {
		wl.WriteString(hex.EncodeToString(h[:]) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "wl.txt"), wl.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		text := strconv.Itoa(port)
		cmd := exec.Command(Binary, "-i", "127.0.0.1", "-p", text, "-P", text, "-u", "nobody", "-d", dir, "-w", "/wl.txt")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			tb.Fatalf("opentracker: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				_ = cmd.Process.Signal(os.Interrupt) // its systemd unit stops it with SIGINT
				select {
				case <-exited:
				case <-time.After(3 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
		}
		t := &Tracker{Port: port}
		if lastErr = t.waitReady(exited, hashes); lastErr == nil {
			tb.Cleanup(stop)
			return t
		}
		stop()
		lastErr = fmt.Errorf("%w; output: %s", lastErr, out.String())
	}
	tb.Fatalf("opentracker did not start: %v", lastErr)
	return nil
}

// waitReady waits until opentracker listens and, when there are hashes,
// has loaded its whitelist: it reads the file in a thread of its own
// after binding, and until then answers every announce with a bare
// header (its "not tracked").
func (t *Tracker) waitReady(exited chan struct{}, hashes [][20]byte) error {
	deadline := time.Now().Add(10 * time.Second)
	listening := false
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("opentracker exited")
		default:
		}
		if !listening {
			c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(t.Port)), time.Second)
			if err == nil {
				_ = c.Close()
				listening = true
			}
		}
		if listening {
			if len(hashes) == 0 {
				return nil
			}
			// A stopped for a peer never announced adds nothing.
			if err := t.announce(hashes[0], PeerAddr(0), wire.EventStopped); err == nil {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("opentracker not ready on %d", t.Port)
}

func freePort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free TCP+UDP port on 127.0.0.1")
}

// PeerAddr is the n-th fake peer's address (n >= 0): 127.0.0.(2+n) while
// that fits, then on into 127.0.x.y, port 10000+n%50000.
func PeerAddr(n int) netip.AddrPort {
	ip := 2 + n
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(ip >> 16), byte(ip >> 8), byte(ip)}), uint16(10000+n%50000))
}

// Announce announces fake peers from..from+n-1 (PeerAddr) as leechers of
// hash to the tracker over UDP, each from its own source address.
func (t *Tracker) Announce(tb testing.TB, hash [20]byte, from, n int) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		if err := t.announce(hash, PeerAddr(i), wire.EventStarted); err != nil {
			tb.Fatalf("announcing fake peer %d: %v", i, err)
		}
	}
}

// Stop announces that peers from..from+n-1 stopped.
func (t *Tracker) Stop(tb testing.TB, hash [20]byte, from, n int) {
	tb.Helper()
	for i := from; i < from+n; i++ {
		if err := t.announce(hash, PeerAddr(i), wire.EventStopped); err != nil {
			tb.Fatalf("stopping fake peer %d: %v", i, err)
		}
	}
}

func (t *Tracker) announce(hash [20]byte, peer netip.AddrPort, event wire.Event) error {
	local := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer.Addr(), 0))
	remote := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(t.Port)))
	conn, err := net.DialUDP("udp", local, remote)
	if err != nil {
		return err
	}
	defer conn.Close()
	buf := make([]byte, 2048)
	exchange := func(req *wire.UDPRequest, want wire.Action) (*wire.UDPResponse, error) {
		var b [4]byte
		_, _ = rand.Read(b[:])
		req.TransactionID = binary.BigEndian.Uint32(b[:])
		for range 3 {
			if _, err := conn.Write(wire.AppendUDPRequest(nil, req)); err != nil {
				return nil, err
			}
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				continue
			}
			var resp wire.UDPResponse
			if n == 8 && want == wire.ActionAnnounce {
				return nil, fmt.Errorf("opentracker does not track %x (yet)", req.InfoHash)
			}
			if err := wire.ParseUDPResponse(buf[:n], &resp); err != nil {
				return nil, err
			}
			if resp.TransactionID != req.TransactionID || resp.Action != want {
				return nil, fmt.Errorf("reply %+v to action %d", resp, want)
			}
			return &resp, nil
		}
		return nil, fmt.Errorf("no reply from opentracker on %d", t.Port)
	}
	resp, err := exchange(&wire.UDPRequest{Action: wire.ActionConnect}, wire.ActionConnect)
	if err != nil {
		return err
	}
	req := wire.UDPRequest{ConnectionID: resp.ConnectionID, Action: wire.ActionAnnounce, InfoHash: hash,
		Left: 1000, Event: event, NumWant: 0, Port: peer.Port()}
	copy(req.PeerID[:], fmt.Sprintf("-FK0001-%012d", peer.Port()))
	_, err = exchange(&req, wire.ActionAnnounce)
	return err
}
