package queues

import "strings"

// versionServed answers, for the plain claim, what claim.lua's version
// gate would: whether a client at version may be served under minimum
// (claim.lua: `version == ” or version_less(version, min_version)`
// refuses). Versions compare as claim.lua compares them: runs of ASCII
// letters and digits, each split into digit runs and letter runs; digit
// runs numerically (leading zeros dropped, then by length, then by
// digits), a digit run above a letter run, letter runs as text; missing
// tokens as "0". sure is false where two differing letter runs decide:
// Lua compares those with strcoll, under the locale redis-server was
// started in, so only claim.lua can say; the caller then runs claim.lua.
func versionServed(version, minimum string) (served, sure bool) {
	if version == "" {
		return false, true
	}
	a, b := versionTokens(version), versionTokens(minimum)
	for i := 0; i < max(len(a), len(b)); i++ {
		x, y := "0", "0"
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		c, ok := compareVersionTokens(x, y)
		if !ok {
			return false, false
		}
		if c != 0 {
			return c > 0, true
		}
	}
	return true, true // equal: not less
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// versionTokens splits as claim.lua's version_tokens: %w+ runs (ASCII
// letters and digits; Redis sets only LC_COLLATE, so ctype is "C"), each
// into maximal digit and letter runs.
func versionTokens(v string) []string {
	var tokens []string
	for i := 0; i < len(v); {
		c := v[i]
		if !isDigit(c) && !isLetter(c) {
			i++
			continue
		}
		j := i + 1
		for j < len(v) && (isDigit(v[j]) == isDigit(c)) && (isDigit(v[j]) || isLetter(v[j])) {
			j++
		}
		tokens = append(tokens, v[i:j])
		i = j
	}
	return tokens
}

// compareVersionTokens is claim.lua's compare_tokens; ok is false where
// it would compare two differing letter runs (strcoll).
func compareVersionTokens(a, b string) (int, bool) {
	aNum, bNum := isDigit(a[0]), isDigit(b[0])
	switch {
	case aNum && bNum:
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			if len(a) < len(b) {
				return -1, true
			}
			return 1, true
		}
		return strings.Compare(a, b), true
	case aNum != bNum:
		if aNum {
			return 1, true
		}
		return -1, true
	case a == b:
		return 0, true
	}
	return 0, false
}
