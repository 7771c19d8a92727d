package leaderboard

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"strconv"
	"strings"
)

//go:embed assets
var assets embed.FS

// Static is the page's assets (style.css, app.js), served under /static/.
func Static() fs.FS {
	sub, _ := fs.Sub(assets, "assets")
	return sub
}

// ProjectPage is the project page's HTML; it is static, and app.js reads
// the project from the URL.
func ProjectPage() []byte {
	page, _ := assets.ReadFile("assets/project.html")
	return page
}

// DownloaderPage is the downloader page's HTML (/downloaders/<nick>/):
// static, downloader.js draws it from /downloaders/<nick>.json.
func DownloaderPage() []byte {
	page, _ := assets.ReadFile("assets/downloader.html")
	return page
}

// AdminPage is the web admin's HTML (/admin/): static, admin.js draws
// it from the admin API.
func AdminPage() []byte {
	page, _ := assets.ReadFile("assets/admin.html")
	return page
}

// TrackerPage is the tracker page's HTML (/tracker/): static, tracker.js
// draws it from /tracker.json.
func TrackerPage() []byte {
	page, _ := assets.ReadFile("assets/tracker.html")
	return page
}

// IndexTemplate renders the list of projects at /.
var IndexTemplate = template.Must(template.New("index.html").Funcs(template.FuncMap{"count": FormatCount}).ParseFS(assets, "assets/index.html"))

// FormatCount writes a count with thousands separators (1,234,567), as
// the project page does.
func FormatCount(n any) string {
	var v int64
	switch x := n.(type) {
	case int64:
		v = x
	case int:
		v = int64(x)
	case float64:
		v = int64(math.Round(x))
	default:
		return fmt.Sprint(n)
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	digits := strconv.FormatInt(v, 10)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return sign + b.String()
}
