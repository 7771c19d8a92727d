package ipmetrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
)

func TestParseSettings(t *testing.T) {
	c, err := ipmetrics.ParseSettings(nil)
	require.NoError(t, err)
	require.False(t, c.Enabled)
	require.Equal(t, ipmetrics.DefaultQueue, c.Queue)
	require.Equal(t, ipmetrics.DefaultWindow, c.Window)

	c, err = ipmetrics.ParseSettings([]byte(`{"enabled":true,"geoip_db":"/x/city.mmdb","queue":100,"batch":10,"cache_size":-1,"cache_ttl":"10m","window":"24h"}`))
	require.NoError(t, err)
	require.Equal(t, ipmetrics.Config{Enabled: true, GeoIPDB: []string{"/x/city.mmdb"}, Queue: 100, Batch: 10, CacheSize: -1,
		CacheTTL: 10 * time.Minute, Window: 24 * time.Hour}, c)
	c, err = ipmetrics.ParseSettings([]byte(`{"geoip_db":["a.mmdb","b.mmdb"]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"a.mmdb", "b.mmdb"}, c.GeoIPDB)

	for _, bad := range []struct{ json, field string }{
		{`{"queue":-1}`, "queue"}, {`{"batch":20000}`, "batch"}, {`{"cache_size":-2}`, "cache_size"},
		{`{"cache_ttl":"soon"}`, "cache_ttl"}, {`{"window":"-1h"}`, "window"}, {`{"geoip_db":7}`, "geoip_db"},
		{`{"geoip_db":[""]}`, "geoip_db"}, {`{"colour":"red"}`, "colour"},
	} {
		_, err := ipmetrics.ParseSettings([]byte(bad.json))
		require.ErrorContains(t, err, bad.field, bad.json)
	}
}
