package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"hash"
	"net/netip"
	"time"
)

// Connection-id validity, as chihaya does it: an id is good for
// ConnIDLifetime after it was issued, plus ConnIDClockSkew either way so
// several tracker hosts sharing a secret need not agree to the second.
// BEP 15 asks clients to reconnect after one minute.
const (
	ConnIDLifetime  = 2 * time.Minute
	ConnIDClockSkew = 10 * time.Second
)

// ConnIDSigner issues and checks stateless BEP 15 connection ids: the top
// 32 bits are the issue time in unix seconds, the low 32 bits are a
// truncated HMAC-SHA256 of that time and the client's IP under a secret.
// No table is kept, so a flood of connect requests costs no memory, and any
// host with the same secret accepts the id.
//
// A ConnIDSigner is not safe for concurrent use: give each reader
// goroutine its own (they are cheap) from the same secret.
type ConnIDSigner struct {
	mac hash.Hash
	msg [4 + 16]byte
	sum [sha256.Size]byte
}

// NewConnIDSigner returns a signer keyed by secret, which should be at
// least 32 random bytes shared by every host answering the same clients.
func NewConnIDSigner(secret []byte) *ConnIDSigner {
	return &ConnIDSigner{mac: hmac.New(sha256.New, secret)}
}

// New issues a connection id for ip at now.
func (s *ConnIDSigner) New(ip netip.Addr, now time.Time) uint64 {
	issued := uint32(now.Unix())
	return uint64(issued)<<32 | uint64(s.tag(issued, ip))
}

// Valid reports whether id was issued by a signer with the same secret to
// ip, no more than ConnIDLifetime before now (give or take the skew).
func (s *ConnIDSigner) Valid(id uint64, ip netip.Addr, now time.Time) bool {
	issued := uint32(id >> 32)
	age := now.Unix() - int64(issued)
	if age < -int64(ConnIDClockSkew/time.Second) || age > int64((ConnIDLifetime+ConnIDClockSkew)/time.Second) {
		return false
	}
	var want, got [4]byte
	binary.BigEndian.PutUint32(want[:], s.tag(issued, ip))
	binary.BigEndian.PutUint32(got[:], uint32(id))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

func (s *ConnIDSigner) tag(issued uint32, ip netip.Addr) uint32 {
	binary.BigEndian.PutUint32(s.msg[0:4], issued)
	ip16 := ip.Unmap().As16() // an IPv4 client has one id whichever socket it used
	copy(s.msg[4:], ip16[:])
	s.mac.Reset()
	s.mac.Write(s.msg[:])
	sum := s.mac.Sum(s.sum[:0])
	return binary.BigEndian.Uint32(sum)
}
