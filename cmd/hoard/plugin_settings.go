package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/plugins/pluginhost"
)

// describeTimeout bounds asking one plugin for its settings schema (a
// binary is launched for it).
const describeTimeout = 30 * time.Second

// pluginSchema is what the file's [plugin.NAME.settings] are checked
// against: the plugin's schema, or nil when it is not known (a binary
// outside `config check`, or one that describes none).
func pluginSchema(ctx context.Context, name, path string, describeBinaries bool) (*plugins.SettingsSchema, error) {
	if path != "" && !describeBinaries {
		return nil, nil
	}
	if path == "" {
		if _, ok := builtinPlugins[name]; !ok {
			return nil, fmt.Errorf("no builtin plugin %q; set path to its binary", name)
		}
	}
	schema, err := pluginhost.DescribeSettings(ctx, pluginhost.Spec{Name: name, Path: path}, builtinPlugins, nil, describeTimeout)
	if errors.Is(err, plugins.ErrNoSchema) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &schema, nil
}

// checkPluginKeys names every key of a plugin's settings table the schema
// does not know, every value of the wrong type, and every secret typed
// in. rel is the table's path within the settings document ("" at its
// root), where its path within the file.
func checkPluginKeys(schema *plugins.SettingsSchema, doc map[string]any, rel, where string, fail func(key, format string, args ...any)) {
	for key, v := range doc {
		path := strings.TrimPrefix(rel+"."+key, ".")
		full := where + "." + key
		if schema.IsSection(path) {
			if table, ok := v.(map[string]any); ok {
				checkPluginKeys(schema, table, path, full, fail)
			} else {
				fail(full, "want a [%s] section, not %s", full, tomlType(v))
			}
			continue
		}
		if k, ok := schema.Lookup(path); ok {
			if k.Secret {
				continue // resolvePluginSecrets refuses it typed in
			}
			if err := sameKind(k.Default, v); err != nil {
				fail(full, "%v", err)
			}
			continue
		}
		if base, ok := secretBase(key); ok {
			if _, known := schema.Lookup(strings.TrimPrefix(rel+"."+base, ".")); known {
				continue
			}
		}
		msg := "unknown key"
		if near := nearestSchemaKey(schema, rel, key); near != "" {
			msg += "; did you mean " + near + "?"
		}
		fail(full, "%s", msg)
	}
}

// secretBase is KEY for KEY_file or KEY_env.
func secretBase(key string) (string, bool) {
	for _, suffix := range []string{secretFileSuffix, secretEnvSuffix} {
		if base, ok := strings.CutSuffix(key, suffix); ok {
			return base, true
		}
	}
	return "", false
}

// nearestSchemaKey is the key of the same table closest to a mistyped
// one, or "".
func nearestSchemaKey(schema *plugins.SettingsSchema, rel, typed string) string {
	best, bestDistance := "", 3
	for _, k := range schema.Keys {
		name := k.Key
		if rel != "" {
			var ok bool
			if name, ok = strings.CutPrefix(k.Key, rel+"."); !ok {
				continue
			}
		}
		name, _, _ = strings.Cut(name, ".")
		if d := editDistance(typed, name); d < bestDistance {
			best, bestDistance = name, d
		}
	}
	return best
}

// sameKind checks a file value against the JSON kind of the key's
// default: a string, a number (whole or not), a boolean or a list.
func sameKind(def json.RawMessage, v any) error {
	var d any
	if err := json.Unmarshal(def, &d); err != nil {
		return nil // Validate refused such a schema
	}
	switch d.(type) {
	case string:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("want a string, not %s", tomlType(v))
		}
	case float64:
		switch v.(type) {
		case int64, float64:
		default:
			return fmt.Errorf("want a number, not %s", tomlType(v))
		}
	case bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("want true or false, not %s", tomlType(v))
		}
	case []any:
		if _, ok := v.([]any); !ok {
			return fmt.Errorf("want a list, not %s", tomlType(v))
		}
	}
	return nil
}

// writePluginDefaults prints each builtin plugin's settings as commented
// [plugin.NAME] and [plugin.NAME.settings…] sections: removing the "# "
// of every line that has one (not the "## " help lines) gives a valid
// configuration that runs the plugin with its defaults.
func writePluginDefaults(ctx context.Context, b *strings.Builder) error {
	names := make([]string, 0, len(builtinPlugins))
	for name := range builtinPlugins {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		schema, err := pluginSchema(ctx, name, "", false)
		if err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
		fmt.Fprintf(b, "\n# [plugin.%s]\n## empty: the builtin, in-process; the path of its binary (hoard-%s) runs it in its own process, as production should\n# path = \"\"\n", name, name)
		if schema == nil {
			continue
		}
		// Keys in order of their tables: the root's first, then each
		// section's, as TOML wants a table's keys before its subtables.
		var tables []string
		byTable := map[string][]plugins.SettingKey{}
		for _, k := range schema.Keys {
			table := ""
			if i := strings.LastIndex(k.Key, "."); i >= 0 {
				table = k.Key[:i]
			}
			if _, seen := byTable[table]; !seen {
				tables = append(tables, table)
			}
			byTable[table] = append(byTable[table], k)
		}
		sort.SliceStable(tables, func(i, j int) bool { return tables[i] == "" && tables[j] != "" })
		for _, table := range tables {
			header := "plugin." + name + ".settings"
			if table != "" {
				header += "." + table
			}
			fmt.Fprintf(b, "#\n# [%s]\n", header)
			for _, k := range byTable[table] {
				leaf := k.Key[strings.LastIndex(k.Key, ".")+1:]
				if k.Secret {
					fmt.Fprintf(b, "## %s; a secret: %s%s = \"PATH\" or %s%s = \"VARIABLE\"\n", k.Help, leaf, secretFileSuffix, leaf, secretEnvSuffix)
					continue
				}
				value, err := tomlValue(k.Default)
				if err != nil {
					return fmt.Errorf("plugin %s: %s: %w", name, k.Key, err)
				}
				fmt.Fprintf(b, "## %s\n# %s = %s\n", k.Help, leaf, value)
			}
		}
	}
	return nil
}

// tomlValue writes a JSON default as a TOML value. A JSON string,
// number, boolean or list of them is already one (json.Marshal's escapes
// are TOML's), so it is kept as written, compacted; null and objects have
// no TOML value.
func tomlValue(raw json.RawMessage) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", err
	}
	text := buf.String()
	if text == "null" || strings.HasPrefix(text, "{") || strings.Contains(text, "null") && strings.HasPrefix(text, "[") {
		return "", fmt.Errorf("default %s has no TOML value", text)
	}
	return text, nil
}
