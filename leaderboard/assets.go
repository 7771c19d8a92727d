package leaderboard

import (
	"embed"
	"html/template"
	"io/fs"
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

// IndexTemplate renders the list of projects at /.
var IndexTemplate = template.Must(template.ParseFS(assets, "assets/index.html"))
