package pluginhost

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hoardproject/hoard/plugins"
)

// MaxSettingsBytes caps one plugin's settings document.
const MaxSettingsBytes = 1 << 20

// ParseSpecs reads hoard's plugin configuration:
//
//   - plugins: "NAME=PATH" runs the binary at PATH as plugin NAME; a bare
//     "NAME" runs the builtin NAME (from --plugin, repeatable, or
//     HOARD_PLUGINS, comma-separated).
//   - settings: "NAME=JSON" or "NAME=@FILE" gives plugin NAME its settings
//     document (from --plugin-settings, repeatable).
//
// Every named plugin appears once, in order; settings for a plugin that is
// not listed are an error, so a typo cannot silently drop them.
func ParseSpecs(entries, settings []string) ([]Spec, error) {
	var specs []Spec
	index := map[string]int{}
	var errs []error
	for _, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, path, _ := strings.Cut(entry, "=")
		name, path = strings.TrimSpace(name), strings.TrimSpace(path)
		if err := plugins.ValidateName(name); err != nil {
			errs = append(errs, fmt.Errorf("--plugin %q: %w", entry, err))
			continue
		}
		if _, dup := index[name]; dup {
			errs = append(errs, fmt.Errorf("--plugin %q: plugin %q is named twice", entry, name))
			continue
		}
		index[name] = len(specs)
		specs = append(specs, Spec{Name: name, Path: path})
	}
	for _, entry := range settings {
		name, value, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok {
			errs = append(errs, fmt.Errorf("--plugin-settings %q: want NAME=JSON or NAME=@FILE", entry))
			continue
		}
		i, listed := index[name]
		if !listed {
			errs = append(errs, fmt.Errorf("--plugin-settings for %q, which no --plugin names", name))
			continue
		}
		doc, err := readSettings(value)
		if err != nil {
			errs = append(errs, fmt.Errorf("--plugin-settings for %q: %w", name, err))
			continue
		}
		specs[i].Settings = doc
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return specs, nil
}

func readSettings(value string) (json.RawMessage, error) {
	raw := []byte(value)
	if path, isFile := strings.CutPrefix(value, "@"); isFile {
		info, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		if info.Size() > MaxSettingsBytes {
			return nil, fmt.Errorf("%s is %d bytes; the limit is %d", path, info.Size(), MaxSettingsBytes)
		}
		if raw, err = os.ReadFile(path); err != nil {
			return nil, err
		}
	}
	if len(raw) > MaxSettingsBytes {
		return nil, fmt.Errorf("settings are %d bytes; the limit is %d", len(raw), MaxSettingsBytes)
	}
	if !json.Valid(raw) {
		return nil, errors.New("settings are not valid JSON")
	}
	return json.RawMessage(raw), nil
}
