// Package bittorrent is hoard's BitTorrent swarm tracker plugin: announce and
// scrape listeners (HTTP and UDP) in front of a Redis-backed swarm store.
//
// This file is the seam between the two halves. The listeners (package
// bittorrent/wire and the servers in this package) parse requests and render
// responses; a Swarms implementation (package bittorrent/swarm, over Redis)
// decides who may announce and which peers they get. Keeping the seam this
// narrow lets each half be tested without the other.
package bittorrent

import (
	"context"
	"net/netip"
	"time"
)

// InfoHash is a v1 (SHA-1) info-hash. v2-only (SHA-256) torrents announce the
// truncated hash, as BEP 52 specifies, so 20 bytes is enough.
type InfoHash [20]byte

// PeerID is the 20-byte peer_id a client sends.
type PeerID [20]byte

// Event is an announce's event parameter.
type Event uint8

// The announce events, numbered as BEP 15 numbers them.
const (
	EventNone      Event = 0
	EventCompleted Event = 1
	EventStarted   Event = 2
	EventStopped   Event = 3
)

// AnnounceRequest is one announce, already parsed and validated by a
// listener. The listener caps NumWant and fills Addr from the socket.
type AnnounceRequest struct {
	InfoHash   InfoHash
	PeerID     PeerID
	Addr       netip.AddrPort // where other peers should connect
	Uploaded   uint64
	Downloaded uint64
	Left       uint64
	Event      Event
	NumWant    int    // already capped; 0 means "send no peers"
	Passkey    string // empty in open mode
	Key        string // the client's key parameter, if any
	// PeerFamily restricts the returned peers to one address family. A
	// UDP reply carries only its socket's family (BEP 15), so the store
	// picks among those peers rather than the listener dropping the
	// others after the pick (which could leave a client in a mostly
	// other-family swarm with none).
	PeerFamily PeerFamily
}

// PeerFamily is the address family of the peers an announce wants.
type PeerFamily uint8

const (
	AnyFamily PeerFamily = iota // HTTP: peers and peers6 both
	IPv4Only                    // 6-byte compact peers
	IPv6Only                    // 18-byte compact peers
)

// Peer is one peer returned to a client.
type Peer struct {
	ID   PeerID
	Addr netip.AddrPort
}

// AnnounceResponse is what a listener renders. Peers may mix address
// families; HTTP splits them into peers and peers6, UDP keeps the family of
// the socket the request came in on.
type AnnounceResponse struct {
	Interval    time.Duration
	MinInterval time.Duration
	Complete    int64 // seeders
	Incomplete  int64 // leechers
	Downloaded  int64 // snatches
	Peers       []Peer
}

// ScrapeEntry is one torrent's scrape counts (BEP 48).
type ScrapeEntry struct {
	Complete   int64
	Incomplete int64
	Downloaded int64
}

// Swarms is the store behind the listeners.
type Swarms interface {
	// Announce records the peer and returns up to NumWant other peers.
	Announce(ctx context.Context, req *AnnounceRequest) (*AnnounceResponse, error)
	// Scrape returns one entry per hash, in order. Unknown torrents get zero
	// counts in open mode; in private mode the passkey must be valid.
	Scrape(ctx context.Context, passkey string, hashes []InfoHash) ([]ScrapeEntry, error)
}

// BatchAnnouncer is a Swarms that answers several announces in one call,
// each as its Announce would and as atomic, in fewer round trips to its
// storage. The UDP listener hands it each read's announces.
type BatchAnnouncer interface {
	// AnnounceBatch answers reqs[i] into results[i] (len(results) ==
	// len(reqs)).
	AnnounceBatch(ctx context.Context, reqs []*AnnounceRequest, results []AnnounceResult)
}

// AnnounceResult is one answer of a BatchAnnouncer: Announce's two results.
type AnnounceResult struct {
	Resp *AnnounceResponse
	Err  error
}

// ClientError is a refusal the client's user should read (bad passkey,
// unregistered torrent, client not whitelisted). Listeners render its Reason
// as a bencoded "failure reason" (HTTP) or a BEP 15 error packet (UDP). Any
// other error is an internal failure and is rendered without details.
type ClientError struct {
	Reason string
}

func (e *ClientError) Error() string { return e.Reason }

// ErrUnknownPasskey is the refusal of a well-formed passkey the tracker
// does not know. A Swarms returns this very value, so the listeners can
// tell a miss (errors.Is) and count misses per address.
var ErrUnknownPasskey = &ClientError{Reason: "unknown passkey"}
