// Package opentracker runs Debian's opentracker on 127.0.0.1 as a peer to
// measure against and an external tracker to score with: the announce
// benchmark (cmd/hoard-bench) and the tests (announcer/opentrackertest)
// start it the same way. It binds 127.0.0.1 only, and its announces come
// from other loopback source addresses and go to 127.0.0.1 only.
package opentracker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hoardproject/hoard/internal/freeport"
	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// Binary is where Debian installs opentracker.
const Binary = "/usr/bin/opentracker"

// readyTimeout bounds one start: listening, and the whitelist loaded.
const readyTimeout = 10 * time.Second

// Process is a running opentracker.
type Process struct {
	// Port is its TCP and UDP port on 127.0.0.1.
	Port int
	// Pid is its process id (for its CPU time).
	Pid int

	cmd    *exec.Cmd
	exited chan struct{}
	output *outputHead
	once   sync.Once
}

// Start runs binary (Binary when empty) chrooted to dir as nobody,
// whitelisting hashes (Debian builds it in whitelist mode), and returns
// once it listens and has loaded its whitelist. dir is created, and it and
// its parents are made readable by nobody. A port taken by someone else
// between choosing and binding is retried with another. The caller stops
// it with Stop; it also dies with the caller (Pdeathsig).
func Start(ctx context.Context, binary, dir string, hashes [][20]byte) (*Process, error) {
	if binary == "" {
		binary = Binary
	}
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("opentracker is needed (apt-get install -y opentracker): %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for d := dir; d != "/" && d != "."; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	var wl bytes.Buffer
	if err := WriteWhitelist(&wl, hashes); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "wl.txt"), wl.Bytes(), 0o644); err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		// opentracker binds TCP and UDP; a collision left by freeport is
		// retried below on a fresh port.
		port, err := freeport.Get(freeport.TCP | freeport.UDP)
		if err != nil {
			return nil, err
		}
		p, err := launch(binary, dir, port)
		if err != nil {
			return nil, err
		}
		if lastErr = p.waitReady(ctx, hashes); lastErr == nil {
			return p, nil
		}
		p.Stop()
		lastErr = fmt.Errorf("%w; its output: %s", lastErr, p.output.String())
		if ctx.Err() != nil {
			return nil, lastErr
		}
	}
	return nil, fmt.Errorf("opentracker did not start: %w", lastErr)
}

// WriteWhitelist writes hashes one per line in lowercase hex, the format
// of opentracker's -w/access.whitelist file.
func WriteWhitelist(w io.Writer, hashes [][20]byte) error {
	line := make([]byte, 41)
	line[40] = '\n'
	for _, h := range hashes {
		hex.Encode(line, h[:])
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}

func launch(binary, dir string, port int) (*Process, error) {
	text := strconv.Itoa(port)
	// -w is read after the chroot, so it is relative to -d.
	cmd := exec.Command(binary, "-i", "127.0.0.1", "-p", text, "-P", text, "-u", "nobody", "-d", dir, "-w", "/wl.txt")
	output := &outputHead{}
	cmd.Stdout, cmd.Stderr = output, output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("opentracker: %w", err)
	}
	p := &Process{Port: port, Pid: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{}), output: output}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Stop interrupts it (its systemd unit stops it with SIGINT), kills it
// after 3 s, and waits; calling it again does nothing.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// Addr is its TCP and UDP address.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// UDPURL and HTTPURL are its announce URLs.
func (p *Process) UDPURL() string  { return "udp://" + p.Addr() + "/announce" }
func (p *Process) HTTPURL() string { return "http://" + p.Addr() + "/announce" }

// waitReady waits until opentracker listens and, when there are hashes,
// has loaded its whitelist: it reads the file in a thread of its own
// after binding, and until then answers every announce with a bare
// header (its "not tracked").
func (p *Process) waitReady(ctx context.Context, hashes [][20]byte) error {
	deadline := time.Now().Add(readyTimeout)
	listening := false
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return errors.New("opentracker exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if !listening {
			c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
			if err == nil {
				_ = c.Close()
				listening = true
			}
		}
		if listening {
			if len(hashes) == 0 {
				return nil
			}
			// opentracker loads its whitelist in a thread of its own, after
			// it listens. A stopped is answered in full whether or not the
			// hash is listed, so only a started tells that the list is in
			// (until then it gets the 8-byte "not tracked" reply); the
			// stopped then takes the probe's peer out again.
			probe := netip.MustParseAddrPort("127.0.0.2:10000")
			if err := p.Announce(hashes[0], probe, wire.EventStarted); err == nil {
				if err := p.Announce(hashes[0], probe, wire.EventStopped); err != nil {
					return fmt.Errorf("opentracker: take the readiness probe out: %w", err)
				}
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("opentracker not ready on %s within %s", p.Addr(), readyTimeout)
}

// Announce sends one UDP announce (connect, then announce) of a leecher
// at peer, from peer's address, which must be a loopback address: the
// packets go to 127.0.0.1 only.
func (p *Process) Announce(hash [20]byte, peer netip.AddrPort, event wire.Event) error {
	if !peer.Addr().IsLoopback() {
		return fmt.Errorf("opentracker: announce from %s: only loopback sources", peer.Addr())
	}
	local := net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer.Addr(), 0))
	remote := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p.Port)))
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
		return nil, fmt.Errorf("no reply from opentracker on %d", p.Port)
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

// outputHead keeps the first few KB opentracker prints, for errors.
type outputHead struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *outputHead) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if room := 4096 - o.buf.Len(); room > 0 {
		o.buf.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}

func (o *outputHead) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
