package btplugin

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/bittorrent/ipmetrics"
	"github.com/hoardproject/hoard/plugins/bittorrent/orphans"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
	"github.com/hoardproject/hoard/plugins/bittorrent/reaper"
	"github.com/hoardproject/hoard/plugins/bittorrent/scoring"
)

// Every field of every settings struct is in the schema, and nothing
// else: a key added to a section without a line here fails.
func TestSettingsSchemaNamesEveryField(t *testing.T) {
	schema, err := (&Tracker{}).SettingsSchema(t.Context())
	require.NoError(t, err)
	require.NoError(t, schema.Validate())
	var fields []string
	collect := func(prefix string, v any) {
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
			switch {
			case name == "" || name == "-":
			case ty.Field(i).Type == reflect.TypeOf(json.RawMessage{}) || ty.Field(i).Type.Kind() == reflect.Struct:
				// A section: its own struct is collected below.
			case strings.HasSuffix(name, "_secret_file") || strings.HasSuffix(name, "_secret_env"):
				// The file's KEY_file/KEY_env for the secret KEY: the
				// host reads those itself.
			default:
				fields = append(fields, prefix+name)
			}
		}
	}
	collect("", Settings{})
	collect("limits.", LimitSettings{})
	collect("full_scrape.", FullScrapeSettings{})
	collect("accounting.", AccountingSettings{})
	collect("scoring.", scoring.Settings{})
	collect("reaper.", reaper.Settings{})
	collect("outbox.", outbox.Settings{})
	collect("metrics.", ipmetrics.Settings{})
	collect("orphans.", orphans.Settings{})
	var keys []string
	for _, k := range schema.Keys {
		keys = append(keys, k.Key)
		require.NotEmpty(t, k.Help, k.Key)
	}
	sort.Strings(fields)
	sort.Strings(keys)
	require.Equal(t, fields, keys)
}

// defaultsDocument is the settings document holding every key of the
// schema at its default (secrets left out), plus extra top-level keys.
func defaultsDocument(t *testing.T, extra map[string]any) json.RawMessage {
	doc := map[string]any{}
	for _, k := range settingKeys() {
		if k.Secret {
			continue
		}
		var v any
		require.NoError(t, json.Unmarshal(k.Default, &v))
		section, leaf, nested := strings.Cut(k.Key, ".")
		if !nested {
			doc[k.Key] = v
			continue
		}
		if doc[section] == nil {
			doc[section] = map[string]any{}
		}
		doc[section].(map[string]any)[leaf] = v
	}
	for k, v := range extra {
		doc[k] = v
	}
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	return raw
}

// Each default printed is what the key's absence means: a document of
// every default parses to the same limits, store configuration and
// section policies as an empty one, in either mode.
func TestSettingsSchemaDefaultsAreTheDefaults(t *testing.T) {
	for _, mode := range []string{"open", "private"} {
		t.Run(mode, func(t *testing.T) {
			var empty, full Settings
			emptyCfg, emptyPolicy, err := empty.parse(json.RawMessage(`{"mode":"` + mode + `"}`))
			require.NoError(t, err)
			fullCfg, fullPolicy, err := full.parse(defaultsDocument(t, map[string]any{"mode": mode}))
			require.NoError(t, err)
			eg, fg := emptyPolicy.Guard.Config(), fullPolicy.Guard.Config()
			eg.Now, fg.Now = nil, nil
			require.Equal(t, eg, fg, "limits")
			emptyStore, err := emptyCfg.WithDefaults()
			require.NoError(t, err)
			fullStore, err := fullCfg.WithDefaults()
			require.NoError(t, err)
			// max_numwant caps the announce reply before the store's own
			// cap (200) applies, so its default (100) is the reply's.
			require.Equal(t, 200, emptyStore.MaxNumWant)
			require.Equal(t, 100, fullStore.MaxNumWant)
			emptyStore.MaxNumWant = fullStore.MaxNumWant
			require.Equal(t, emptyStore, fullStore, "store")

			private := mode == "private"
			_, es, err := scoring.ParseSettings(nil, private)
			require.NoError(t, err)
			_, fs, err := scoring.ParseSettings(full.Scoring, private)
			require.NoError(t, err)
			require.Equal(t, es, fs, "scoring")
			_, eo, err := outbox.ParseSettings(nil)
			require.NoError(t, err)
			_, fo, err := outbox.ParseSettings(full.Outbox)
			require.NoError(t, err)
			require.Equal(t, eo, fo, "outbox")
			em, err := ipmetrics.ParseSettings(nil)
			require.NoError(t, err)
			fm, err := ipmetrics.ParseSettings(full.Metrics)
			require.NoError(t, err)
			require.Empty(t, fm.GeoIPDB)
			fm.GeoIPDB = nil // an empty list is no database, as is none
			require.Equal(t, em, fm, "metrics")
			_, eorph, err := orphans.ParseSettings(nil, fullCfg)
			require.NoError(t, err)
			_, forph, err := orphans.ParseSettings(full.Orphans, fullCfg)
			require.NoError(t, err)
			require.Equal(t, eorph, forph, "orphans")
			if private {
				_, er, err := reaper.ParseSettings(json.RawMessage(`{"enabled":true}`), true)
				require.NoError(t, err)
				var section map[string]any
				require.NoError(t, json.Unmarshal(full.Reaper, &section))
				section["enabled"] = true
				raw, err := json.Marshal(section)
				require.NoError(t, err)
				_, fr, err := reaper.ParseSettings(raw, true)
				require.NoError(t, err)
				require.Equal(t, er, fr, "reaper")
			}
		})
	}
}

var _ plugins.SettingsDescriber = (*Tracker)(nil)
