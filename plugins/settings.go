package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// SettingsDescriber is the contract's optional call that describes a
// plugin's settings document (Config.Settings), so `hoard config
// defaults` can print every key a plugin takes and `hoard config check`
// can name an unknown one, without the host linking the plugin. It is
// called on a plugin that was never configured: it must not need Redis,
// listeners or settings. Both transports carry it; a plugin binary built
// before it answers ErrNoSchema.
type SettingsDescriber interface {
	SettingsSchema(ctx context.Context) (SettingsSchema, error)
}

// ErrNoSchema: the plugin does not describe its settings (it does not
// implement SettingsDescriber, or its binary predates the call).
var ErrNoSchema = errors.New("plugin does not describe its settings")

// SettingsSchema is every key of a plugin's settings document.
type SettingsSchema struct {
	Keys []SettingKey `json:"keys"`
}

// SettingKey is one leaf key of a plugin's settings document.
type SettingKey struct {
	// Key is the key's dotted path in the document: "mode", or
	// "limits.announce_rate" for announce_rate in the limits object.
	Key string `json:"key"`
	// Default is the value the plugin uses when the key is absent, as
	// JSON ("\"30m\"", "5", "false", "[]").
	Default json.RawMessage `json:"default"`
	// Help says in one line what the key does.
	Help string `json:"help"`
	// Secret: the value is never typed into a configuration file; the
	// file names where it is (KEY_file, KEY_env) and the host reads it.
	Secret bool `json:"secret,omitempty"`
}

// MaxSettingKeys bounds a schema, as the other limits bound a description.
const MaxSettingKeys = 1000

var settingPathPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}(\.[a-z][a-z0-9_]{0,63}){0,7}$`)

// Validate checks a schema: paths of lowercase words joined by dots, each
// key once, no key also a section of another, defaults valid JSON, help
// on one line.
func (s SettingsSchema) Validate() error {
	if len(s.Keys) > MaxSettingKeys {
		return fmt.Errorf("settings schema lists %d keys; the limit is %d", len(s.Keys), MaxSettingKeys)
	}
	var errs []error
	seen := map[string]bool{}
	for _, k := range s.Keys {
		if !settingPathPattern.MatchString(k.Key) {
			errs = append(errs, fmt.Errorf("setting key %q must be words of a-z, 0-9 and _ joined by dots", k.Key))
		}
		if seen[k.Key] {
			errs = append(errs, fmt.Errorf("setting key %q is described twice", k.Key))
		}
		seen[k.Key] = true
		if !json.Valid(k.Default) {
			errs = append(errs, fmt.Errorf("setting key %q: default %q is not JSON", k.Key, k.Default))
		}
		if strings.ContainsAny(k.Help, "\r\n") {
			errs = append(errs, fmt.Errorf("setting key %q: help is more than one line", k.Key))
		}
	}
	for _, k := range s.Keys {
		if s.IsSection(k.Key) {
			errs = append(errs, fmt.Errorf("setting key %q is also a section of other keys", k.Key))
		}
	}
	return errors.Join(errs...)
}

// Lookup finds the key at a dotted path.
func (s SettingsSchema) Lookup(path string) (SettingKey, bool) {
	for _, k := range s.Keys {
		if k.Key == path {
			return k, true
		}
	}
	return SettingKey{}, false
}

// IsSection reports whether path is an object holding keys of the schema
// ("limits" for "limits.addresses").
func (s SettingsSchema) IsSection(path string) bool {
	for _, k := range s.Keys {
		if strings.HasPrefix(k.Key, path+".") {
			return true
		}
	}
	return false
}
