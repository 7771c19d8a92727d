package queues

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// LimitGroup rate-limits, as one group, the items that match it: an item
// type (the prefix before the first ":"), a glob, or an RE2 expression.
// Items are routed to the group's own sub-queues when they are queued (and
// when groups change), so a request never scans or samples a queue, and
// everything else keeps flowing at full speed while the group is limited.
type LimitGroup struct {
	Name string `json:"name"`
	// Exactly one of Type, Glob and Regex is set.
	Type  string `json:"type,omitempty"`
	Glob  string `json:"glob,omitempty"`
	Regex string `json:"regex,omitempty"`
	// RatePerMinute is how many of the group's items are handed out per
	// minute (0 = none at all: the group is paused); Burst how many may go
	// back to back.
	RatePerMinute float64 `json:"rate_per_minute"`
	Burst         int     `json:"burst"`
}

// MaxLimitGroups caps a project's groups; each adds keys to every claim.
const MaxLimitGroups = 16

var groupNamePattern = regexp.MustCompile(`^[a-z0-9][-_a-z0-9]{0,31}$`)

// compiledGroup is a LimitGroup with its matcher ready.
type compiledGroup struct {
	LimitGroup
	re *regexp.Regexp
}

func (g compiledGroup) matches(item string) bool {
	switch {
	case g.Type != "":
		typ, _, found := strings.Cut(item, ":")
		return found && typ == g.Type
	default:
		return g.re.MatchString(item)
	}
}

// compileGroups checks groups and prepares their matchers. Patterns are
// RE2 or globs, so matching takes linear time whatever an operator types.
func compileGroups(groups []LimitGroup) ([]compiledGroup, error) {
	return compileMatchers("queues.LimitGroups", "limit group", MaxLimitGroups, groups)
}

// compileMatchers checks a list of named matchers (limit groups, or
// filters: what names them in errors) and prepares them.
func compileMatchers(op, what string, most int, groups []LimitGroup) ([]compiledGroup, error) {
	if len(groups) > most {
		return nil, errorf(op, CodeInvalid, "%d %ss; the limit is %d", len(groups), what, most)
	}
	seen := map[string]bool{}
	out := make([]compiledGroup, 0, len(groups))
	for i, g := range groups {
		bad := func(format string, args ...any) error {
			return errorf(op, CodeInvalid, "%s %d (%q): %s", what, i, g.Name, fmt.Sprintf(format, args...))
		}
		if !groupNamePattern.MatchString(g.Name) {
			return nil, bad("name must be 1-32 of a-z, 0-9, - and _")
		}
		if seen[g.Name] {
			return nil, bad("duplicate name")
		}
		seen[g.Name] = true
		set := 0
		for _, s := range []string{g.Type, g.Glob, g.Regex} {
			if s != "" {
				set++
			}
		}
		if set != 1 {
			return nil, bad("set exactly one of type, glob and regex")
		}
		if g.RatePerMinute < 0 || g.RatePerMinute > 6e6 {
			return nil, bad("rate_per_minute must be between 0 and 6000000")
		}
		if g.Burst == 0 {
			g.Burst = 1
		}
		if g.Burst < 1 || g.Burst > 1e6 {
			return nil, bad("burst must be between 1 and 1000000")
		}
		c := compiledGroup{LimitGroup: g}
		switch {
		case g.Type != "":
			if strings.ContainsAny(g.Type, ":\x00\n") || len(g.Type) > 64 {
				return nil, bad("type must be an item prefix without ':'")
			}
		case g.Glob != "":
			re, err := globRegexp(g.Glob)
			if err != nil || len(g.Glob) > 1024 {
				return nil, bad("bad glob: %v", err)
			}
			c.re = re
		default:
			re, err := regexp.Compile(g.Regex)
			if err != nil || len(g.Regex) > 1024 {
				return nil, bad("bad RE2 expression: %v", err)
			}
			c.re = re
		}
		out = append(out, c)
	}
	return out, nil
}

// groupFor returns the index of the first group item matches, or -1.
func groupFor(groups []compiledGroup, item string) int {
	for i, g := range groups {
		if g.matches(item) {
			return i
		}
	}
	return -1
}

func decodeGroups(raw string) []LimitGroup {
	var groups []LimitGroup
	if raw != "" {
		_ = json.Unmarshal([]byte(raw), &groups)
	}
	return groups
}

// globRegexp compiles an item glob to RE2: "*" matches any run of
// characters, "/" included (items are URLs as often as names), "?" one
// character, and "[...]" a class; everything else is literal.
func globRegexp(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unclosed [ in %q", glob)
			}
			class := glob[i+1 : i+1+end]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + class + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`$`)
	return regexp.Compile(b.String())
}
