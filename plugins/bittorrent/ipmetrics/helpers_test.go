package ipmetrics_test

import (
	"crypto/sha1"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// TestMain runs every test on a real redis-server and a real 3-node Redis
// Cluster (internal/redistest).
func TestMain(m *testing.M) { redistest.RunMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// epoch is mid-January, so rollover tests cross into February.
var epoch = time.Date(2026, 1, 20, 12, 0, 0, 0, time.UTC)

func infoHash(name string) bittorrent.InfoHash { return sha1.Sum([]byte(name)) }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// place is a location the test database answers.
type place struct {
	network          string
	country, city    string
	postcode         string
	flat             bool // ip-location-db's layout instead of GeoIP2's
	countryOnly      bool
	corruptCityValue bool // city is a number: decoding it fails
}

// testPlaces is the small database the tests locate against.
var testPlaces = []place{
	{network: "81.2.69.0/24", country: "GB", city: "London", postcode: "SW1A"},
	{network: "89.160.20.0/24", country: "SE", city: "Linköping", postcode: "58250"},
	{network: "2001:db8:1::/48", country: "DE", city: "Berlin", postcode: "10115"},
	{network: "2001:db8:2::/48", country: "US", city: "St. Louis", postcode: "63101", flat: true},
	{network: "175.16.199.0/24", country: "CN", countryOnly: true},
	{network: "203.0.113.0/24", country: "JP", corruptCityValue: true},
}

// writeGeoDB builds an IPv6 (IPv4 included) city database with
// mmdbwriter and returns its path.
func writeGeoDB(t testing.TB) string {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "hoard-test-city", IncludeReservedNetworks: true})
	require.NoError(t, err)
	for _, p := range testPlaces {
		_, network, err := net.ParseCIDR(p.network)
		require.NoError(t, err)
		var rec mmdbtype.Map
		switch {
		case p.flat:
			rec = mmdbtype.Map{"country_code": mmdbtype.String(p.country), "city": mmdbtype.String(p.city),
				"postcode": mmdbtype.String(p.postcode)}
		case p.countryOnly:
			rec = mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(p.country)}}
		case p.corruptCityValue:
			rec = mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(p.country)},
				"city": mmdbtype.Uint32(7), "postal": mmdbtype.Uint16(3)}
		default:
			rec = mmdbtype.Map{
				"country": mmdbtype.Map{"iso_code": mmdbtype.String(p.country)},
				"city":    mmdbtype.Map{"names": mmdbtype.Map{"en": mmdbtype.String(p.city)}},
				"postal":  mmdbtype.Map{"code": mmdbtype.String(p.postcode)},
			}
		}
		require.NoError(t, tree.Insert(network, rec))
	}
	path := filepath.Join(t.TempDir(), "test-city.mmdb")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = tree.WriteTo(f)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path
}

func openTestGeo(t testing.TB) *ipmetrics.GeoDB {
	t.Helper()
	g, err := ipmetrics.OpenGeoDB(writeGeoDB(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

type fixture struct {
	t     testing.TB
	b     redistest.Backend
	clock *clock.Fake
	store *ipmetrics.Store
}

func newFixture(t testing.TB, b redistest.Backend) *fixture {
	clk := clock.NewFake(epoch)
	return &fixture{t: t, b: b, clock: clk, store: ipmetrics.NewStore(b.Client, clk, 0)}
}

// register registers one (IP, torrent) pair, both scripts, and returns
// the metrics it counted the IP in.
func (f *fixture) register(ip netip.Addr, hash bittorrent.InfoHash, loc ipmetrics.Location) int {
	f.t.Helper()
	n, err := f.store.Register(f.t.Context(), []ipmetrics.Registration{{IP: ip, Hash: hash, Loc: loc, Global: true, Torrent: true}})
	require.NoError(f.t, err)
	return n
}

func (f *fixture) counters(hash *bittorrent.InfoHash, month string) map[string]int64 {
	f.t.Helper()
	c, err := f.store.Counters(f.t.Context(), hash, month)
	require.NoError(f.t, err)
	return c
}
