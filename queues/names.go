package queues

import (
	"errors"
	"fmt"
	"net/netip"
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

// slugShaped is ^[a-z0-9][-_a-z0-9]{0,63}$, by hand: every warrior call
// checks its slug, and the regexp was 2% of hoard's CPU per round trip
// (docs/warrior-path.md). FuzzSlugShapedIsThePattern holds the two equal.
func slugShaped(slug string) bool {
	if len(slug) < 1 || len(slug) > 64 {
		return false
	}
	for i := 0; i < len(slug); i++ {
		switch c := slug[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

// reservedSlugs would shadow hoard's own routes.
var reservedSlugs = map[string]bool{
	"api": true, "now": true, "metrics": true, "healthz": true, "readyz": true, "debug": true, "backfeed": true,
	"static": true, "admin": true, "dictionary": true, "ws": true, "tracker": true, "downloaders": true,
}

// ValidateSlug checks a project slug. Braces are refused by name because
// they would break the "{slug}" hash tag that keeps a project in one slot.
func ValidateSlug(slug string) error {
	const op = "queues.ValidateSlug"
	switch {
	case !slugShaped(slug):
		// Braces are not slug-shaped; they get their own message. Only
		// here, not first on every request: strings.ContainsAny builds
		// its byte set on every call.
		if strings.ContainsAny(slug, "{}") {
			return errorf(op, CodeInvalid, "project name %q may not contain { or }", slug)
		}
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
	case hasNULOrNewline(item):
		return errorf(op, CodeInvalid, "item name %q contains NUL, CR or LF", truncate(item, 60))
	case !utf8.ValidString(item):
		return errorf(op, CodeInvalid, "item name %q is not valid UTF-8", truncate(item, 60))
	}
	return nil
}

// hasNULOrNewline reports whether s holds a NUL, CR or LF. A loop, not
// strings.ContainsAny, which builds its byte set on every call: that was
// 3% of a one-item done's frontend CPU (every item of every done and
// queue is checked).
func hasNULOrNewline(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c == '\r' || c == '\n' {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// FindControl returns the byte offset of the first control character in
// s and the character, or -1: a C0 control other than tab (U+0000-U+001F),
// DEL (U+007F) or a C1 control (U+0080-U+009F, the bytes C2 80-C2 9F in
// UTF-8). They are never part of an item, a title or a reason: ESC and
// CSI start terminal escapes (a crafted item could rewrite an operator's
// screen when listed), BEL rings, NUL and newlines split the wire
// formats. Tab is let through: it is ordinary whitespace in a title or a
// name copied from a table. One pass over the bytes, no decoding.
func FindControl[T ~string | ~[]byte](s T) (int, rune) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 && c != '\t', c == 0x7f:
			return i, rune(c)
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f:
			return i, rune(s[i+1])
		}
	}
	return -1, 0
}

// CheckText refuses text with a control character (see FindControl),
// naming what it is and the character's byte offset (from 0).
func CheckText(what, s string) error {
	if i, r := FindControl(s); i >= 0 {
		return errorf("queues.CheckText", CodeInvalid, "%s has the control character U+%04X at byte offset %d; control characters other than tab are refused", what, r, i)
	}
	return nil
}

// ValidateNewItem is ValidateItem for an item entering hoard (queued,
// backfed, imported): it also refuses control characters. Items already
// stored are finished and released with ValidateItem alone, so one that
// came in before this check can still leave.
func ValidateNewItem(item string) error {
	if err := ValidateItem(item); err != nil {
		return err
	}
	if i, r := FindControl(item); i >= 0 {
		return errorf("queues.ValidateNewItem", CodeInvalid, "item %q has the control character U+%04X at byte offset %d; control characters other than tab are refused", truncate(item, 60), r, i)
	}
	return nil
}

// atIndex names the batch position of a bad entry in an input error.
func atIndex(err error, what string, i int) error {
	var qe *Error
	if errors.As(err, &qe) {
		out := *qe
		out.Message = fmt.Sprintf("%s at index %d: %s", what, i, qe.Message)
		return &out
	}
	return err
}

// ValidateBlockTarget checks what a block names and returns it as it is
// stored: a nickname (seesaw's rule, ValidateDownloader) or an IP address
// (in its canonical form, so "2001:DB8::0:1" blocks the "2001:db8::1" a
// client connects from). A CIDR is refused: a block matches one nickname
// or one address exactly, and a range that blocks nobody must not look
// as if it did.
func ValidateBlockTarget(who string) (string, error) {
	const op = "queues.ValidateBlockTarget"
	if addr, err := netip.ParseAddr(who); err == nil && addr.Zone() == "" {
		return addr.Unmap().String(), nil
	}
	shown := truncate(who, 64)
	switch {
	case strings.Contains(who, "/"):
		return "", errorf(op, CodeInvalid, "block target %q is a range; blocks match one nickname or one IP address exactly, so block each address", shown)
	case strings.Contains(who, ":") || strings.Contains(who, ".") && strings.Trim(who, "0123456789.") == "":
		return "", errorf(op, CodeInvalid, "block target %q is not a valid IP address", shown)
	case ValidateDownloader(who) != nil:
		return "", errorf(op, CodeInvalid, "block target %q is neither a nickname (3-30 of a-z, A-Z, 0-9, - and _) nor an IP address", shown)
	}
	return who, nil
}

// validateBlock checks a block's target and entry before anything is
// written, and returns the target as it is stored.
func validateBlock(op, who string, entry BlockEntry) (string, error) {
	who, err := ValidateBlockTarget(who)
	if err != nil {
		return "", err
	}
	if len(entry.Reason) > MaxBlockReason {
		return "", errorf(op, CodeInvalid, "reason is longer than %d bytes", MaxBlockReason)
	}
	if err := CheckText("reason", entry.Reason); err != nil {
		return "", err
	}
	return who, nil
}

// MaxBlockReason bounds a block's reason.
const MaxBlockReason = 500
