package wire

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConnIDs(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	signer := NewConnIDSigner(secret)
	other := NewConnIDSigner(secret) // another goroutine or host
	ip := netip.MustParseAddr("192.0.2.7")
	now := time.Unix(1_800_000_000, 0)

	id := signer.New(ip, now)
	require.True(t, other.Valid(id, ip, now))
	require.True(t, other.Valid(id, netip.MustParseAddr("::ffff:192.0.2.7"), now), "v4-mapped is the same client")
	require.True(t, other.Valid(id, ip, now.Add(ConnIDLifetime)))
	require.True(t, other.Valid(id, ip, now.Add(-ConnIDClockSkew)), "a host slightly behind accepts it")
	require.False(t, other.Valid(id, ip, now.Add(ConnIDLifetime+ConnIDClockSkew+time.Second)), "expired")
	require.False(t, other.Valid(id, ip, now.Add(-ConnIDClockSkew-time.Second)), "from the future")
	require.False(t, other.Valid(id, netip.MustParseAddr("192.0.2.8"), now), "another client's id")
	require.False(t, other.Valid(id^1, ip, now), "tampered tag")
	require.False(t, other.Valid(id+1<<32, ip, now.Add(time.Second)), "tampered time")
	require.False(t, NewConnIDSigner([]byte("another secret")).Valid(id, ip, now))
	require.False(t, signer.Valid(ProtocolID, ip, now))

	require.Zero(t, testing.AllocsPerRun(100, func() { signer.Valid(signer.New(ip, now), ip, now) }))
}

func BenchmarkConnID(b *testing.B) {
	signer := NewConnIDSigner([]byte("0123456789abcdef0123456789abcdef"))
	ip := netip.MustParseAddr("192.0.2.7")
	now := time.Now()
	for b.Loop() {
		signer.Valid(signer.New(ip, now), ip, now)
	}
}
