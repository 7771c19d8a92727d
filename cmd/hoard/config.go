package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/spf13/pflag"

	"github.com/hoardproject/hoard/plugins"
)

// maxConfigBytes caps the configuration file: it is read whole.
const maxConfigBytes = 1 << 20

// Suffixes of the keys that name where a secret is, instead of holding it.
const (
	secretFileSuffix = "_file"
	secretEnvSuffix  = "_env"
)

// configFile is a parsed configuration file: the flag values each of its
// settings stands for, with the line each came from.
type configFile struct {
	path   string
	values map[string]fileValue // by flag name
}

type fileValue struct {
	key    string
	line   int
	values []string
}

// loadConfigFile reads and checks a configuration file. Its error lists
// every problem, each as FILE:LINE: …, unknown keys included. A builtin
// plugin's settings are checked against its schema; a plugin binary's
// only by `config check` (checkConfigFile), which launches it to ask.
func loadConfigFile(path string) (*configFile, error) {
	return loadConfig(context.Background(), path, false)
}

// checkConfigFile is loadConfigFile that also asks each plugin binary
// the file names for its settings schema.
func checkConfigFile(ctx context.Context, path string) (*configFile, error) {
	return loadConfig(ctx, path, true)
}

func loadConfig(ctx context.Context, path string, describeBinaries bool) (*configFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a configuration file may have", path, info.Size(), maxConfigBytes)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := toml.Unmarshal(raw, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("%s:%d:%d: %s", path, row, col, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := &configFile{path: path, values: map[string]fileValue{}}
	lines := keyLines(raw)
	var errs []error
	fail := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s: %s", path, lines[key], key, fmt.Sprintf(format, args...)))
	}
	byKey := map[string]setting{}
	for _, s := range serveSettings {
		byKey[s.fileKey()] = s
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return lines[keys[i]] < lines[keys[j]] })
	for _, key := range keys {
		value := doc[key]
		if key == "plugin" {
			c.pluginSections(ctx, value, lines, describeBinaries, fail)
			continue
		}
		if s, ok := byKey[key]; ok {
			switch {
			case s.fromSections:
				fail(key, "give it as [plugin.NAME] sections (see `hoard config defaults`)")
			case s.secret:
				fail(key, "a secret is never typed into the file: set %s%s (a file holding it) or %s%s (a variable holding it)",
					key, secretFileSuffix, key, secretEnvSuffix)
			default:
				vals, err := flagValues(s, value)
				if err != nil {
					fail(key, "%v", err)
					continue
				}
				c.values[s.flag] = fileValue{key: key, line: lines[key], values: vals}
			}
			continue
		}
		if s, where, ok := secretSource(byKey, key); ok {
			secret, err := readSecret(where, value)
			if err != nil {
				fail(key, "%v", err)
				continue
			}
			c.values[s.flag] = fileValue{key: key, line: lines[key], values: s.envValues(secret)}
			continue
		}
		msg := "unknown key"
		if near := nearestKey(key); near != "" {
			msg += "; did you mean " + near + "?"
		}
		fail(key, "%s", msg)
	}
	// Each value must parse as its flag's: checked here, so `config check`
	// names the line of a bad duration or number.
	var scratch serveOptions
	fs := serveFlagSet(&scratch)
	for flag, fv := range c.values {
		for _, v := range fv.values {
			if err := fs.Set(flag, v); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %s: %v", path, fv.line, fv.key, err))
			}
		}
	}
	if err := errors.Join(sortedErrors(errs)...); err != nil {
		return nil, err
	}
	return c, nil
}

// sortedErrors orders errors by their text, which starts FILE:LINE.
func sortedErrors(errs []error) []error {
	slices.SortStableFunc(errs, func(a, b error) int {
		return lineOf(a.Error()) - lineOf(b.Error())
	})
	return errs
}

func lineOf(msg string) int {
	parts := strings.SplitN(msg, ":", 3)
	if len(parts) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return n
}

// secretSource finds the secret setting a KEY_file or KEY_env key names.
func secretSource(byKey map[string]setting, key string) (setting, string, bool) {
	for _, suffix := range []string{secretFileSuffix, secretEnvSuffix} {
		if base, ok := strings.CutSuffix(key, suffix); ok {
			if s, found := byKey[base]; found && s.secret {
				return s, suffix, true
			}
		}
	}
	return setting{}, "", false
}

// readSecret reads a secret from the file (KEY_file) or the variable
// (KEY_env) the configuration names. A file's trailing newline is not
// part of the secret.
func readSecret(suffix string, value any) (string, error) {
	name, ok := value.(string)
	if !ok || name == "" {
		return "", errors.New("want a string: a file's path or a variable's name")
	}
	if suffix == secretEnvSuffix {
		v, set := os.LookupEnv(name)
		if !set || v == "" {
			return "", fmt.Errorf("variable %s is not set", name)
		}
		return v, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	secret := strings.TrimRight(string(raw), "\r\n")
	if secret == "" {
		return "", fmt.Errorf("%s is empty", name)
	}
	return secret, nil
}

// flagValues turns a file value into its flag's string values, refusing a
// value of the wrong TOML type (a number where a duration string goes).
func flagValues(s setting, value any) ([]string, error) {
	var scratch serveOptions
	switch s.ptr(&scratch).(type) {
	case *string:
		if v, ok := value.(string); ok {
			return []string{v}, nil
		}
		return nil, fmt.Errorf("want a string, not %s", tomlType(value))
	case *bool:
		if v, ok := value.(bool); ok {
			return []string{strconv.FormatBool(v)}, nil
		}
		return nil, fmt.Errorf("want true or false, not %s", tomlType(value))
	case *int:
		if v, ok := value.(int64); ok {
			return []string{strconv.FormatInt(v, 10)}, nil
		}
		return nil, fmt.Errorf("want a whole number, not %s", tomlType(value))
	case *float64:
		switch v := value.(type) {
		case int64:
			return []string{strconv.FormatInt(v, 10)}, nil
		case float64:
			return []string{strconv.FormatFloat(v, 'g', -1, 64)}, nil
		}
		return nil, fmt.Errorf("want a number, not %s", tomlType(value))
	case *time.Duration:
		if v, ok := value.(string); ok {
			return []string{v}, nil
		}
		return nil, fmt.Errorf("want a duration string such as \"70s\", not %s", tomlType(value))
	case *[]string:
		list, ok := value.([]any)
		if !ok {
			return nil, fmt.Errorf("want a list of strings, not %s", tomlType(value))
		}
		out := make([]string, 0, len(list))
		for _, item := range list {
			str, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("want a list of strings, not one holding %s", tomlType(item))
			}
			out = append(out, str)
		}
		if len(out) == 0 {
			// pflag's slice flags take "" as the empty list.
			return []string{""}, nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("setting of an unknown kind")
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "a whole number"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// pluginSections reads [plugin.NAME] sections: path (empty or absent: the
// builtin NAME) and settings, the plugin's own document, whose
// KEY_file/KEY_env keys are read as secrets and whose keys are checked
// against the plugin's settings schema when it is known.
func (c *configFile) pluginSections(ctx context.Context, value any, lines map[string]int, describeBinaries bool, fail func(key, format string, args ...any)) {
	sections, ok := value.(map[string]any)
	if !ok {
		fail("plugin", "want [plugin.NAME] sections, not %s", tomlType(value))
		return
	}
	names := make([]string, 0, len(sections))
	for name := range sections {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return lines["plugin."+names[i]] < lines["plugin."+names[j]] })
	var entries, settings []string
	for _, name := range names {
		where := "plugin." + name
		section, ok := sections[name].(map[string]any)
		if !ok {
			fail(where, "want a [%s] section, not %s", where, tomlType(sections[name]))
			continue
		}
		entry, path := name, ""
		if v, ok := section["path"]; ok {
			if path, ok = v.(string); !ok {
				fail(where+".path", "want a string, not %s", tomlType(v))
				continue
			}
			if path != "" {
				entry = name + "=" + path
			}
		}
		for key, v := range section {
			switch key {
			case "path":
			case "settings":
				doc, ok := v.(map[string]any)
				if !ok {
					fail(where+".settings", "want a [%s.settings] section, not %s", where, tomlType(v))
					continue
				}
				schema, err := pluginSchema(ctx, name, path, describeBinaries)
				if err != nil {
					at := where
					if path != "" {
						at += ".path"
					}
					fail(at, "cannot ask the plugin for its settings: %v", err)
				}
				if schema != nil {
					checkPluginKeys(schema, doc, "", where+".settings", fail)
				}
				resolved, err := resolvePluginSecrets(doc, where+".settings", "", schema, fail)
				if err != nil {
					continue
				}
				raw, err := json.Marshal(resolved)
				if err != nil {
					fail(where+".settings", "%v", err)
					continue
				}
				settings = append(settings, name+"="+string(raw))
			default:
				fail(where+"."+key, "unknown key (a plugin section has path and settings)")
			}
		}
		entries = append(entries, entry)
	}
	if len(entries) > 0 {
		c.values["plugin"] = fileValue{key: "plugin", line: lines["plugin."+names[0]], values: entries}
	}
	if len(settings) > 0 {
		c.values["plugin-settings"] = fileValue{key: "plugin.*.settings", line: lines["plugin."+names[0]], values: settings}
	}
}

// secretWords mark a plugin setting that holds a secret when the plugin
// describes no settings: such a value is never typed into the file
// (KEY_file or KEY_env names where it is).
var secretWords = []string{"secret", "token", "password", "passkey"}

// resolvePluginSecrets copies a plugin's settings document, replacing
// KEY_file and KEY_env keys by KEY holding what they name. rel is the
// table's path in the document; a key is a secret when the schema says
// so, or, with no schema, when its name looks like one.
func resolvePluginSecrets(doc map[string]any, where, rel string, schema *plugins.SettingsSchema, fail func(key, format string, args ...any)) (map[string]any, error) {
	out := make(map[string]any, len(doc))
	var failed error
	for key, v := range doc {
		full := where + "." + key
		path := strings.TrimPrefix(rel+"."+key, ".")
		switch {
		case strings.HasSuffix(key, secretFileSuffix) || strings.HasSuffix(key, secretEnvSuffix):
			suffix := secretFileSuffix
			if strings.HasSuffix(key, secretEnvSuffix) {
				suffix = secretEnvSuffix
			}
			secret, err := readSecret(suffix, v)
			if err != nil {
				fail(full, "%v", err)
				failed = err
				continue
			}
			out[strings.TrimSuffix(key, suffix)] = secret
		default:
			if str, ok := v.(string); ok && str != "" && isSecretSetting(schema, path, key) {
				failed = errors.New("typed secret")
				fail(full, "a secret is never typed into the file: set %s%s or %s%s", key, secretFileSuffix, key, secretEnvSuffix)
				continue
			}
			if table, ok := v.(map[string]any); ok {
				nested, err := resolvePluginSecrets(table, full, path, schema, fail)
				if err != nil {
					failed = err
				}
				out[key] = nested
				continue
			}
			out[key] = v
		}
	}
	return out, failed
}

func isSecretSetting(schema *plugins.SettingsSchema, path, key string) bool {
	if schema == nil {
		return looksSecret(key)
	}
	k, ok := schema.Lookup(path)
	return ok && k.Secret
}

func looksSecret(key string) bool {
	for _, w := range secretWords {
		if strings.Contains(strings.ToLower(key), w) {
			return true
		}
	}
	return false
}

// keyLines maps each dotted key of a TOML document (and each table
// header) to its line, for errors that name it.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		keyOf := func(n *unstable.Node) ([]string, int) {
			var parts []string
			line := 0
			it := n.Key()
			for it.Next() {
				k := it.Node()
				parts = append(parts, string(k.Data))
				if line == 0 && k.Raw.Length > 0 {
					line = p.Shape(k.Raw).Start.Line
				}
			}
			return parts, line
		}
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, line := keyOf(e)
			table = parts
			for i := range parts {
				k := strings.Join(parts[:i+1], ".")
				if _, seen := lines[k]; !seen {
					lines[k] = line
				}
			}
		case unstable.KeyValue:
			parts, line := keyOf(e)
			full := append(slices.Clone(table), parts...)
			for i := len(table); i < len(full); i++ {
				k := strings.Join(full[:i+1], ".")
				if _, seen := lines[k]; !seen {
					lines[k] = line
				}
			}
		}
	}
	return lines
}

// nearestKey is the file key closest to a mistyped one, or "".
func nearestKey(typed string) string {
	best, bestDistance := "", 3
	for _, s := range serveSettings {
		for _, k := range []string{s.fileKey(), s.fileKey() + secretFileSuffix, s.fileKey() + secretEnvSuffix} {
			if d := editDistance(typed, k); d < bestDistance {
				best, bestDistance = k, d
			}
		}
	}
	return best
}

// serveFlagSet is a flag set holding every serve setting, bound to o.
func serveFlagSet(o *serveOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	for _, s := range serveSettings {
		s.register(fs, o)
	}
	return fs
}

// applySettings fills every setting no flag gave from its variable, else
// from the file (nil: none), keeping flag > variable > file > default.
func applySettings(fs *pflag.FlagSet, file *configFile) error {
	var errs []error
	for _, s := range serveSettings {
		if fs.Changed(s.flag) {
			continue
		}
		var vals []string
		var where string
		if raw, ok := os.LookupEnv(s.env); ok && raw != "" {
			vals, where = s.envValues(raw), "$"+s.env
		} else if fv, ok := file.value(s.flag); ok {
			vals, where = fv.values, fmt.Sprintf("%s:%d: %s", file.path, fv.line, fv.key)
		} else {
			continue
		}
		for _, v := range vals {
			if err := fs.Set(s.flag, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

func (c *configFile) value(flag string) (fileValue, bool) {
	if c == nil {
		return fileValue{}, false
	}
	v, ok := c.values[flag]
	return v, ok
}
