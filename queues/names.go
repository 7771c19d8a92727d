package queues

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits on names that come from the network.
const (
	// MaxItemBytes is the longest item name accepted. Long URLs are real
	// items, so this is generous; NUL and newlines are the separators of
	// the wire formats and are never part of a name.
	MaxItemBytes = 8192
	// MaxMulti caps how many items one request may claim.
	MaxMulti = 1000
)

var (
	slugPattern = regexp.MustCompile(`^[a-z0-9][-_a-z0-9]{0,63}$`)
)

// reservedSlugs would shadow hoard's own routes.
var reservedSlugs = map[string]bool{
	"api": true, "now": true, "metrics": true, "healthz": true, "backfeed": true,
	"static": true, "admin": true, "dictionary": true, "ws": true, "tracker": true,
}

// ValidateSlug checks a project slug. Braces are refused by name because
// they would break the "{slug}" hash tag that keeps a project in one slot.
func ValidateSlug(slug string) error {
	const op = "queues.ValidateSlug"
	switch {
	case strings.ContainsAny(slug, "{}"):
		return errorf(op, CodeInvalid, "project name %q may not contain { or }", slug)
	case !slugPattern.MatchString(slug):
		return errorf(op, CodeInvalid, "project name %q must be 1-64 of a-z, 0-9, - and _, starting with a letter or digit", slug)
	case reservedSlugs[slug]:
		return errorf(op, CodeInvalid, "project name %q is reserved", slug)
	}
	return nil
}

// ValidateDownloader checks a nickname with seesaw's own rule
// (check_downloader_or_exit, and universal-tracker's): ^[-_a-zA-Z0-9]{3,30}$.
// It is a loop rather than a regexp because it runs on every request.
func ValidateDownloader(name string) error {
	valid := len(name) >= 3 && len(name) <= 30
	for i := 0; valid && i < len(name); i++ {
		c := name[i]
		valid = c == '-' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
	}
	if !valid {
		return errorf("queues.ValidateDownloader", CodeInvalid,
			"downloader %q must be 3-30 characters of a-z, A-Z, 0-9, - and _", truncate(name, 40))
	}
	return nil
}

// ValidateItem checks one item name.
func ValidateItem(item string) error {
	const op = "queues.ValidateItem"
	switch {
	case item == "":
		return errorf(op, CodeInvalid, "empty item name")
	case len(item) > MaxItemBytes:
		return errorf(op, CodeInvalid, "item name of %d bytes is longer than %d", len(item), MaxItemBytes)
	case strings.ContainsAny(item, "\x00\r\n"):
		return errorf(op, CodeInvalid, "item name %q contains NUL, CR or LF", truncate(item, 60))
	case !utf8.ValidString(item):
		return errorf(op, CodeInvalid, "item name %q is not valid UTF-8", truncate(item, 60))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
