package main

import (
	"encoding/json"

	"github.com/hoardproject/hoard/queues"
)

// secretFields are the JSON fields the CLI prints as fingerprints unless
// --show-secret: a terminal's scrollback and a shared screen are no place
// for them (the logs show only the fingerprint too).
var secretFields = map[string]bool{"backfeed_secret": true}

// redactSecrets replaces every secret field of a JSON document by its
// fingerprint ("fp:1a2b3c4d"), at any depth.
func redactSecrets(raw json.RawMessage) json.RawMessage {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(redactValue(v))
	if err != nil {
		return raw
	}
	return out
}

func redactValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, field := range t {
			if s, ok := field.(string); ok && secretFields[k] && s != "" {
				t[k] = "fp:" + queues.SecretFingerprint(s) + " (--show-secret shows it)"
				continue
			}
			t[k] = redactValue(field)
		}
	case []any:
		for i := range t {
			t[i] = redactValue(t[i])
		}
	}
	return v
}

// printProject prints an admin API answer, its secrets as fingerprints
// unless show.
func printProject(raw json.RawMessage, show bool) error {
	if !show {
		raw = redactSecrets(raw)
	}
	return printJSON(raw)
}
