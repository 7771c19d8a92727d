package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

// TestBadInputIsRefusedAndChangesNothing: each bad input of issue 21 is
// answered with a 4xx whose message names what is wrong and where, and
// Redis is exactly as before (every key's DUMP and TTL, on a real
// redis-server and a real cluster).
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	const esc, bel, del, c1 = "\x1b", "\x07", "\x7f", "\u009b"
	type call struct {
		name, method, path, body string
		status                   int
		says                     []string
	}
	calls := []call{
		// Items: admin add, backfeed, import.
		{"admin add ESC", http.MethodPost, "/api/v1/projects/bad/items", `{"items":["ok-1","x\u001b[31mred"]}`, 400,
			[]string{"item at index 1", "U+001B", "byte offset 1", "nothing was queued"}},
		{"admin add BEL in an object", http.MethodPost, "/api/v1/projects/bad/items", `{"items":[{"name":"ring\u0007"}]}`, 400,
			[]string{"item at index 0", "U+0007", "byte offset 4"}},
		{"admin add C1", http.MethodPost, "/api/v1/projects/bad/items", `{"items":["a","b","csi` + c1 + `"]}`, 400,
			[]string{"item at index 2", "U+009B", "byte offset 3"}},
		{"admin add DEL, registered", http.MethodPost, "/api/v1/projects/bad/items", `{"register":true,"items":["x` + del + `"]}`, 400,
			[]string{"item at index 0", "U+007F"}},
		{"backfeed ESC", http.MethodPost, "/backfeed/legacy/bad-" + secret, "good-1\x00good-2\x00b" + esc + "[2J\x00", 400,
			[]string{"backfeed item at index 2", "U+001B", "byte offset 1", "refused whole"}},
		{"backfeed BEL, newline-separated", http.MethodPost, "/backfeed/legacy/bad-" + secret, "one\r\ntwo" + bel + "\r\n", 400,
			[]string{"backfeed item at index 1", "U+0007", "byte offset 3"}},
		{"backfeed CR inside a NUL-separated item", http.MethodPost, "/backfeed/legacy/bad-" + secret, "a\x00b\rc\x00", 400,
			[]string{"backfeed item at index 1", "U+000D"}},
		{"import done ESC", http.MethodPost, "/api/v1/projects/bad/import", `{"done":["d1","d\u001b"]}`, 400,
			[]string{"done item at index 1", "U+001B", "byte offset 1"}},
		{"import claim BEL", http.MethodPost, "/api/v1/projects/bad/import",
			`{"claims":[{"item":"c\u0007","downloader":"alice","claimed_at":"2026-11-22T11:00:00Z"}]}`, 400,
			[]string{"claim at index 0", "U+0007"}},
		// Titles and reasons.
		{"title with an ANSI escape", http.MethodPatch, "/api/v1/projects/bad", `{"title":"Bad \u001b[5mblink"}`, 400,
			[]string{"title", "U+001B", "byte offset 4"}},
		{"new project's title with a C1", http.MethodPost, "/api/v1/projects/bad2", `{"title":"x` + c1 + `"}`, 400,
			[]string{"title", "U+009B", "byte offset 1"}},
		{"block reason with BEL", http.MethodPut, "/api/v1/projects/bad/blocks/mallory", `{"reason":"spam\u0007"}`, 400,
			[]string{"reason", "U+0007", "byte offset 4"}},
		{"global block reason with ESC", http.MethodPut, "/api/v1/blocks/mallory", `{"reason":"\u001b]0;pwned\u0007"}`, 400,
			[]string{"reason", "U+001B", "byte offset 0"}},
		// Unknown fields.
		{"unknown field on create", http.MethodPost, "/api/v1/projects/bad3", `{"titel":"x"}`, 400, []string{`unknown field "titel"`}},
		{"unknown field on patch", http.MethodPatch, "/api/v1/projects/bad", `{"title":"ok","pasued":true}`, 400, []string{`unknown field "pasued"`}},
		{"unknown field on add", http.MethodPost, "/api/v1/projects/bad/items", `{"items":["z"],"queue ":"todo"}`, 400, []string{`unknown field "queue "`}},
		{"unknown field on move", http.MethodPost, "/api/v1/projects/bad/queues/move", `{"from":"todo","to":"secondary","cnt":1}`, 400, []string{`unknown field "cnt"`}},
		{"unknown field on block", http.MethodPut, "/api/v1/projects/bad/blocks/mallory", `{"reson":"x"}`, 400, []string{`unknown field "reson"`}},
		{"unknown field in limit groups", http.MethodPut, "/api/v1/projects/bad/limit-groups", `{"groups":[{"name":"g","glob":"*","rate":5}]}`, 400, []string{`unknown field "rate"`}},
		{"unknown field on release", http.MethodPost, "/api/v1/projects/bad/claims/release", `{"older":"1h"}`, 400, []string{`unknown field "older"`}},
		{"unknown field on import", http.MethodPost, "/api/v1/projects/bad/import", `{"dnoe":["a"]}`, 400, []string{`unknown field "dnoe"`}},
		// Counts.
		{"move count -1", http.MethodPost, "/api/v1/projects/bad/queues/move", `{"from":"todo","to":"secondary","count":-1}`, 400,
			[]string{"count -1", "must be positive"}},
		// Block targets.
		{"block target with NUL", http.MethodPut, "/api/v1/projects/bad/blocks/ab%00cd", ``, 400, []string{`"ab\x00cd"`, "neither a nickname"}},
		{"global block target with NUL", http.MethodPut, "/api/v1/blocks/ab%00cd", ``, 400, []string{`"ab\x00cd"`}},
		{"block target 999.1.1.1", http.MethodPut, "/api/v1/projects/bad/blocks/999.1.1.1", ``, 400, []string{`"999.1.1.1" is not a valid IP address`}},
		{"block target 1.2.3", http.MethodPut, "/api/v1/blocks/1.2.3", ``, 400, []string{"not a valid IP address"}},
		{"block target not an IPv6", http.MethodPut, "/api/v1/blocks/2001:db8::g", ``, 400, []string{"not a valid IP address"}},
		// A range ("10.0.0.0/8") cannot reach the API (its / ends the
		// route); queues.ValidateBlockTarget refuses it too.
		{"block target a range", http.MethodPut, "/api/v1/projects/bad/blocks/10.0.0.0%2F8", ``, 404, nil},
		{"block target too short", http.MethodPut, "/api/v1/blocks/ab", ``, 400, []string{"neither a nickname"}},
		{"block target with a space", http.MethodPut, "/api/v1/blocks/a%20b%20c", ``, 400, []string{"neither a nickname"}},
	}
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		f := newFixture(t, b, server.Config{AdminToken: token})
		s := secret
		f.project("bad", queues.SettingsPatch{BackfeedSecret: &s}, "queued-1", "queued-2")
		before, err := redistest.Snapshot(f.ctx, b.Client)
		require.NoError(t, err)
		for _, c := range calls {
			req, err := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
			require.NoError(t, err, c.name)
			req.Header.Set("Authorization", "Bearer "+token)
			r := f.do(req)
			require.Equal(t, c.status, r.status, "%s: %s", c.name, r.body)
			for _, says := range c.says {
				require.Contains(t, r.body, jsonText(says), c.name)
			}
			after, err := redistest.Snapshot(f.ctx, b.Client)
			require.NoError(t, err)
			require.Equal(t, before, after, "%s changed Redis", c.name)
		}
	})
}

// jsonText is s as it appears inside a JSON string (the error bodies).
func jsonText(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
