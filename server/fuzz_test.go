package server

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/queues"
)

// FuzzParseWarriorPath: any path either routes to a valid slug and action,
// is refused with an error, or is not a warrior path; it never panics.
func FuzzParseWarriorPath(f *testing.F) {
	for _, seed := range []string{"/p/request", "/p/multi=100//request", "/p/multi=3/request", "/p/done",
		"/p/multi=0//request", "//request", "/p//request", "/a{b}/request", "/p/multi=99999999999999999999/request", "/p/multi=+5//request", "/"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		route, ok, err := parseWarriorPath(path)
		if !ok || err != nil {
			return
		}
		if queues.ValidateSlug(route.Slug) != nil {
			t.Fatalf("routed to an invalid slug %q", route.Slug)
		}
		if route.Multi < 1 || route.Multi > queues.MaxMulti {
			t.Fatalf("multi %d out of range", route.Multi)
		}
		if strings.Contains(path, "multi=+") || strings.Contains(path, "multi=-") {
			t.Fatalf("a signed multi was routed: %q", path)
		}
		if !strings.Contains(path, route.Action) {
			t.Fatalf("action %q not in path", route.Action)
		}
	})
}

// FuzzDecodeWarriorBodies: request, done and release bodies decode or fail
// cleanly; a decoded done never carries a negative byte count.
func FuzzDecodeWarriorBodies(f *testing.F) {
	for _, seed := range []string{
		`{"downloader": "tester1", "api_version": "2", "version": "20240101.01"}`,
		`{"downloader": "tester1", "version": "1", "item": "a\u0000b", "bytes": {"data": 1234}, "id": {"pipeline_hash": "abc"}}`,
		`{"downloader": 5, "api_version": 2}`, `{"bytes": {"data": 1.5}}`, `{"bytes": {"data": -1}}`, `{} {}`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req requestBody
		_ = decodeJSON(body, &req)
		var rel releaseBody
		_ = decodeJSON(body, &rel)
		var done doneBody
		if decodeJSON(body, &done) == nil {
			for k, v := range done.Bytes {
				if v < 0 {
					t.Fatalf("negative byte count %q=%d accepted", k, v)
				}
			}
			if done.Item != nil {
				for _, item := range splitItems(*done.Item) {
					_ = queues.ValidateItem(item)
				}
			}
		}
	})
}

// FuzzSplitBackfeed: any body splits into non-empty items without NUL, and
// items plus empty ones never exceed the separators + 1. The control
// check agrees with the split: a body it passes splits into items
// without a control character, and one it refuses has one where it says.
func FuzzSplitBackfeed(f *testing.F) {
	for _, seed := range []string{"a\x00b\x00", "a\nb\r\n", "\x00\x00", "", "\n", "x", "a\x00b\x1bc\x00", "a\r\nb\rc\n", "\xc2\x9b\x00", "x\xc2"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		items, empty := splitBackfeed(body)
		part, offset, r, found := backfeedControl(body)
		if !found {
			for _, item := range items {
				if at, _ := queues.FindControl(item); at >= 0 {
					t.Fatalf("item %q has a control character the check let through", item)
				}
			}
		} else {
			sep := []byte{0}
			if bytes.IndexByte(body, 0) < 0 {
				sep = []byte{'\n'}
			}
			parts := bytes.Split(body, sep)
			if part >= len(parts) || offset >= len(parts[part]) {
				t.Fatalf("control at part %d offset %d, outside the body's %d parts", part, offset, len(parts))
			}
			if at, cr := queues.FindControl(parts[part][offset:]); at != 0 || cr != r {
				t.Fatalf("part %d offset %d: %q has no control character %U there", part, offset, parts[part], r)
			}
		}
		for _, item := range items {
			if item == "" || strings.ContainsRune(item, 0) {
				t.Fatalf("bad item %q", item)
			}
		}
		if len(items)+empty > len(body)+1 {
			t.Fatalf("%d items from %d bytes", len(items)+empty, len(body))
		}
	})
}

// TestMultiTakesDigitsOnly: strconv.Atoi accepts a sign, so "multi=+5"
// used to be served as 5; a tracker URL with a sign is a typo, refused.
func TestMultiTakesDigitsOnly(t *testing.T) {
	for _, path := range []string{"/p/multi=+5//request", "/p/multi=-0//request", "/p/multi= 5//request", "/p/multi=5x//request", "/p/multi=//request"} {
		_, ok, err := parseWarriorPath(path)
		if !ok || err == nil {
			t.Fatalf("%s: routed=%v err=%v, want a refusal", path, ok, err)
		}
	}
	route, ok, err := parseWarriorPath("/p/multi=05//request")
	if !ok || err != nil || route.Multi != 5 {
		t.Fatalf("multi=05: %+v %v %v", route, ok, err)
	}
}

// FuzzDecodeAdminBodies: the admin API's strict decoding never panics,
// and a body it accepts decodes the same way leniently (strictness only
// refuses, never changes what is read).
func FuzzDecodeAdminBodies(f *testing.F) {
	for _, seed := range []string{`{"titel":"x"}`, `{"title":"x"}`, `{"items":["a",{"name":"b"}],"queue":"todo"}`,
		`{"from":"todo","to":"secondary","count":-1}`, `{"reason":"x","extra":1}`, `{"items":[]} {}`, `{`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, fresh := range []func() any{
			func() any { return &queues.SettingsPatch{} }, func() any { return &AddItemsRequest{} },
			func() any { return &MoveQueueRequest{} }, func() any { return &blockRequest{} }, func() any { return &ImportRequest{} },
		} {
			strict, lenient := fresh(), fresh()
			if decodeStrictJSON(body, strict) != nil {
				continue
			}
			if err := decodeJSON(body, lenient); err != nil {
				t.Fatalf("strict accepted what lenient refused: %q: %v", body, err)
			}
			if !reflect.DeepEqual(strict, lenient) {
				t.Fatalf("%q: strict read %+v, lenient %+v", body, strict, lenient)
			}
		}
	})
}

// BenchmarkBackfeedControl: the control check on a full batch (1,000
// items of 60 bytes, NUL-separated), as each backfeed request pays it.
func BenchmarkBackfeedControl(b *testing.B) {
	var body []byte
	for i := range 1000 {
		body = append(body, []byte(strings.Repeat("x", 50)+"/item-"+strings.Repeat("0", 3-len(strconv.Itoa(i%1000)))+strconv.Itoa(i%1000))...)
		body = append(body, 0)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, found := backfeedControl(body); found {
			b.Fatal("a clean body has a control character")
		}
	}
}

// FuzzItemStatusPath: /<slug>/items/<item>.json splits into a slug with
// no "/" and the item, which put back together give the path; anything
// else is not routed here.
func FuzzItemStatusPath(f *testing.F) {
	for _, seed := range []string{"/p/items/x.json", "/p/items/a/b.json", "/p/items/.json", "/p/items/x", "//items/x.json",
		"/p/q/items/x.json", "/p/items/items/x.json.json", "/p/stats.json", "/"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		slug, item, ok := itemStatusPath(path)
		if !ok {
			return
		}
		if slug == "" || strings.Contains(slug, "/") {
			t.Fatalf("slug %q from %q", slug, path)
		}
		if "/"+slug+"/items/"+item+".json" != path && slug+"/items/"+item+".json" != path {
			t.Fatalf("%q split into %q and %q", path, slug, item)
		}
	})
}

// FuzzDecodeFailBody: a fail report's body decodes or fails cleanly, and
// its items and reason go through the engine's checks.
func FuzzDecodeFailBody(f *testing.F) {
	for _, seed := range []string{`{"downloader":"a1b","item":"x","reason":"r"}`, `{"item":"a\u0000b"}`, `{"reason":5}`, `[`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req failBody
		if decodeJSON(body, &req) == nil && req.Item != nil {
			for _, item := range splitItems(*req.Item) {
				_ = queues.ValidateItem(item)
			}
			_ = queues.CheckText("reason", req.Reason)
		}
	})
}

// FuzzParseDownloaderPath: any path under /downloaders/ either names a
// nickname that passes seesaw's rule (so it is safe in a URL, a key and a
// page) or is refused; it never panics.
func FuzzParseDownloaderPath(f *testing.F) {
	for _, seed := range []string{"alice.json", "alice/", "alice", "ab.json", "<b>x</b>/", "a\"b.json", ".json", "/", "",
		"alice.json/", "alice/.json", "x%2Fy/", strings.Repeat("a", 31) + ".json"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, err := parseDownloaderPath(path)
		if err != nil {
			return
		}
		if queues.ValidateDownloader(r.Nick) != nil {
			t.Fatalf("routed to an invalid nickname %q", r.Nick)
		}
		if r.JSON && r.Redirect {
			t.Fatalf("%q is both JSON and a redirect", path)
		}
		want := r.Nick
		switch {
		case r.JSON:
			want += ".json"
		case !r.Redirect:
			want += "/"
		}
		if want != path {
			t.Fatalf("%q parsed as %+v", path, r)
		}
	})
}

// FuzzParseWarriorPathSplitsAsStringsSplit: the segments are cut by hand
// (no allocation per request); the route, whether it is one and its error
// are what splitting with strings.Split gave.
func FuzzParseWarriorPathSplitsAsStringsSplit(f *testing.F) {
	for _, seed := range []string{"/p/request", "/p/multi=100//request", "/p/multi=3/request", "/p/done", "/p/a/b/c/request",
		"/p/multi=3//request/", "/p/multi=3///request", "p/request", "/", "", "//", "/p/multi=0//request", "/P/request"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		route, ok, err := parseWarriorPath(path)
		wantRoute, wantOK, wantErr := splitWarriorPath(path)
		require.Equal(t, wantOK, ok)
		require.Equal(t, wantErr, err)
		if ok {
			require.Equal(t, wantRoute, route)
		}
	})
}

// splitWarriorPath is parseWarriorPath as it was, with strings.Split.
func splitWarriorPath(path string) (warriorRoute, bool, error) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	route := warriorRoute{Multi: 1}
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && strings.HasPrefix(parts[1], "multi="):
	case len(parts) == 4 && strings.HasPrefix(parts[1], "multi=") && parts[2] == "":
	default:
		return route, false, nil
	}
	route.Slug, route.Action = parts[0], parts[len(parts)-1]
	switch route.Action {
	case "request", "done", "upload", "release", "fail":
	default:
		return route, false, nil
	}
	if len(parts) > 2 {
		digits := strings.TrimPrefix(parts[1], "multi=")
		n, err := strconv.Atoi(digits)
		if err != nil || strings.Trim(digits, "0123456789") != "" || n < 1 || n > queues.MaxMulti {
			return route, true, badRequest("multi=N needs N between 1 and %d", queues.MaxMulti)
		}
		route.Multi = n
	}
	if err := queues.ValidateSlug(route.Slug); err != nil {
		return route, true, err
	}
	return route, true, nil
}
