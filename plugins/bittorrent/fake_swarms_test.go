package bittorrent

import (
	"bytes"
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// fakeSwarms is an in-memory Swarms with chihaya's announce semantics,
// enough to drive the listeners: it records every call so tests can check
// what the listener passed on.
type fakeSwarms struct {
	mu sync.Mutex
	// passkeys, when set, is the private-mode user list: other passkeys
	// (and none) get a ClientError.
	passkeys map[string]bool
	// registered, when set, is the torrent whitelist.
	registered map[InfoHash]bool
	// fail, when set, makes every call fail with it.
	fail error
	// interval, when set, overrides the listener's.
	interval time.Duration

	swarms     map[InfoHash]map[PeerID]fakePeer
	downloaded map[InfoHash]int64
	announces  []AnnounceRequest
	scrapes    []fakeScrape
}

type fakePeer struct {
	addr   netip.AddrPort
	seeder bool
}

type fakeScrape struct {
	passkey string
	hashes  []InfoHash
}

func newFakeSwarms() *fakeSwarms {
	return &fakeSwarms{swarms: map[InfoHash]map[PeerID]fakePeer{}, downloaded: map[InfoHash]int64{}}
}

func (f *fakeSwarms) check(passkey string) error {
	if f.fail != nil {
		return f.fail
	}
	if f.passkeys != nil && !f.passkeys[passkey] {
		return ErrUnknownPasskey
	}
	return nil
}

func (f *fakeSwarms) Announce(_ context.Context, req *AnnounceRequest) (*AnnounceResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.announces = append(f.announces, *req)
	if err := f.check(req.Passkey); err != nil {
		return nil, err
	}
	if f.registered != nil && !f.registered[req.InfoHash] {
		return nil, &ClientError{Reason: "unregistered torrent"}
	}
	swarm := f.swarms[req.InfoHash]
	if swarm == nil {
		swarm = map[PeerID]fakePeer{}
		f.swarms[req.InfoHash] = swarm
	}
	switch req.Event {
	case EventStopped:
		delete(swarm, req.PeerID)
	case EventCompleted:
		f.downloaded[req.InfoHash]++
		fallthrough
	default:
		swarm[req.PeerID] = fakePeer{addr: req.Addr, seeder: req.Left == 0}
	}
	resp := &AnnounceResponse{Interval: f.interval, Downloaded: f.downloaded[req.InfoHash]}
	ids := make([]PeerID, 0, len(swarm))
	for id, p := range swarm {
		ids = append(ids, id)
		if p.seeder {
			resp.Complete++
		} else {
			resp.Incomplete++
		}
	}
	slices.SortFunc(ids, func(a, b PeerID) int { return bytes.Compare(a[:], b[:]) })
	for _, id := range ids {
		if len(resp.Peers) >= req.NumWant {
			break
		}
		if id != req.PeerID {
			resp.Peers = append(resp.Peers, Peer{ID: id, Addr: swarm[id].addr})
		}
	}
	return resp, nil
}

func (f *fakeSwarms) Scrape(_ context.Context, passkey string, hashes []InfoHash) ([]ScrapeEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scrapes = append(f.scrapes, fakeScrape{passkey: passkey, hashes: slices.Clone(hashes)})
	if err := f.check(passkey); err != nil {
		return nil, err
	}
	out := make([]ScrapeEntry, len(hashes))
	for i, h := range hashes {
		for _, p := range f.swarms[h] {
			if p.seeder {
				out[i].Complete++
			} else {
				out[i].Incomplete++
			}
		}
		out[i].Downloaded = f.downloaded[h]
	}
	return out, nil
}

// set changes the fake's behaviour while listeners may be using it.
func (f *fakeSwarms) set(change func(f *fakeSwarms)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// addPeer seeds a swarm directly.
func (f *fakeSwarms) addPeer(h InfoHash, id PeerID, addr string, seeder bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.swarms[h] == nil {
		f.swarms[h] = map[PeerID]fakePeer{}
	}
	f.swarms[h][id] = fakePeer{addr: netip.MustParseAddrPort(addr), seeder: seeder}
}

func (f *fakeSwarms) lastAnnounce() AnnounceRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.announces) == 0 {
		return AnnounceRequest{}
	}
	return f.announces[len(f.announces)-1]
}

func (f *fakeSwarms) announceCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.announces)
}

func (f *fakeSwarms) lastScrape() fakeScrape {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.scrapes) == 0 {
		return fakeScrape{}
	}
	return f.scrapes[len(f.scrapes)-1]
}

func (f *fakeSwarms) swarmSize(h InfoHash) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.swarms[h])
}
