package queues

import (
	"regexp"
	"testing"
)

// FuzzSlugShapedIsThePattern: the hand-written slug check accepts exactly
// what the documented pattern does.
func FuzzSlugShapedIsThePattern(f *testing.F) {
	pattern := regexp.MustCompile(`^[a-z0-9][-_a-z0-9]{0,63}$`)
	for _, seed := range []string{"p", "a-b_c", "-a", "_a", "A", "a.b", "", "a\n", "é", "0", "a{b}",
		"a234567890123456789012345678901234567890123456789012345678901234", "a2345678901234567890123456789012345678901234567890123456789012345"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, slug string) {
		if got, want := slugShaped(slug), pattern.MatchString(slug); got != want {
			t.Fatalf("%q: slugShaped %v, the pattern %v", slug, got, want)
		}
	})
}
