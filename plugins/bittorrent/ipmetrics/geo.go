package ipmetrics

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/oschwald/maxminddb-golang/v2"
)

// Locator tells where an IP is. It must never fail: an IP it cannot place
// is Unknown.
type Locator interface {
	Locate(ip netip.Addr) Location
}

// NoGeo places every IP at Unknown (metrics without a database: users
// only, in effect).
type NoGeo struct{}

// Locate returns Unknown everywhere.
func (NoGeo) Locate(netip.Addr) Location {
	return Location{Country: Unknown, City: Unknown, Postcode: Unknown}
}

// GeoDB reads MaxMind-format (.mmdb) city databases. It understands two
// record layouts:
//   - MaxMind's GeoIP2/GeoLite2 City: country.iso_code, city.names.en,
//     postal.code;
//   - ip-location-db's flat one (the DB-IP and GeoLite2 builds on npm):
//     country_code, city, postcode.
//
// Several files may be given (ip-location-db ships IPv4 and IPv6 apart):
// an IP is looked up in each file of its family in order, and the first
// record found answers.
type GeoDB struct {
	readers []*maxminddb.Reader
	paths   []string
}

// OpenGeoDB opens the databases. A missing or malformed file is an error
// here, at configuration, never at lookup.
func OpenGeoDB(paths ...string) (*GeoDB, error) {
	if len(paths) == 0 {
		return nil, errors.New("geoip: no database file given")
	}
	g := &GeoDB{paths: paths}
	for _, p := range paths {
		r, err := maxminddb.Open(p)
		if err != nil {
			_ = g.Close()
			return nil, fmt.Errorf("geoip: open %s: %w", p, err)
		}
		g.readers = append(g.readers, r)
	}
	return g, nil
}

// Paths names the files, in lookup order.
func (g *GeoDB) Paths() []string { return g.paths }

// Close closes every file. Safe on a nil GeoDB and twice.
func (g *GeoDB) Close() error {
	if g == nil {
		return nil
	}
	var errs []error
	for _, r := range g.readers {
		errs = append(errs, r.Close())
	}
	g.readers = nil
	return errors.Join(errs...)
}

// Locate returns where the IP is; Unknown parts where no file says. A
// lookup or decode error (a corrupt record) is Unknown too: btstat
// panicked on one.
func (g *GeoDB) Locate(ip netip.Addr) Location {
	ip = ip.Unmap()
	for _, r := range g.readers {
		if ip.Is6() && r.Metadata.IPVersion == 4 {
			continue // an IPv4-only file cannot answer
		}
		res := r.Lookup(ip)
		if res.Err() != nil || !res.Found() {
			continue
		}
		var loc Location
		if res.DecodePath(&loc.Country, "country", "iso_code") != nil || loc.Country == "" {
			_ = res.DecodePath(&loc.Country, "country_code")
		}
		if res.DecodePath(&loc.City, "city", "names", "en") != nil || loc.City == "" {
			loc.City = ""
			_ = res.DecodePath(&loc.City, "city")
		}
		if res.DecodePath(&loc.Postcode, "postal", "code") != nil || loc.Postcode == "" {
			loc.Postcode = ""
			_ = res.DecodePath(&loc.Postcode, "postcode")
		}
		return loc.Normal()
	}
	return NoGeo{}.Locate(ip)
}
