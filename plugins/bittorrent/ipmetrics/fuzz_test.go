package ipmetrics

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLocationMetricNames: whatever a GeoIP database says (its strings
// are data from a file the operator downloaded), the metric names built
// from a normalised location parse back to the same place, and stay
// short and free of control characters.
func FuzzLocationMetricNames(f *testing.F) {
	f.Add("US", "St. Louis", "63101")
	f.Add("gb", "", " ")
	f.Add("X", "a.b.users", "postcodes.x")
	f.Add("DE", "Berlin\x00\n", strings.Repeat("ü", 80))
	f.Fuzz(func(t *testing.T, cc, city, pc string) {
		loc := Location{Country: cc, City: city, Postcode: pc}.Normal()
		for _, part := range []string{loc.Country, loc.City, loc.Postcode} {
			if part == "" || len(part) > 64 || !utf8.ValidString(part) {
				t.Fatalf("bad part %q of %+v", part, loc)
			}
			for _, r := range part {
				if r < 0x20 || r == 0x7f {
					t.Fatalf("control character in %q", part)
				}
			}
		}
		kind, place, ok := ParseMetric(cityMetric(loc.Country, loc.City))
		if !ok || kind != "city" || place.Country != loc.Country || place.Name != loc.City {
			t.Fatalf("city metric of %+v parsed as %s %+v %v", loc, kind, place, ok)
		}
		kind, place, ok = ParseMetric(postcodeMetric(loc.Country, loc.Postcode))
		if !ok || kind != "postcode" || place.Country != loc.Country || place.Name != loc.Postcode {
			t.Fatalf("postcode metric of %+v parsed as %s %+v %v", loc, kind, place, ok)
		}
		kind, place, ok = ParseMetric(countryMetric(loc.Country))
		if !ok || kind != "country" || place.Country != loc.Country {
			t.Fatalf("country metric of %+v parsed as %s %+v %v", loc, kind, place, ok)
		}
	})
}
