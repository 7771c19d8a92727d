package btadmin

import (
	"net/http"

	"github.com/hoardproject/hoard/plugins"
)

// Pages are the tracker's views in hoard's web admin (the plugin
// declares them, Description.AdminPages): each section is one route of
// this API, which the console calls through the host like the CLI does.
// A caller sees the sections its role may call.
var Pages = []plugins.AdminPage{
	{Name: "torrents", Title: "Torrents", Sections: []plugins.PageSection{
		{Title: "Swarm totals", Kind: plugins.SectionObject, Path: "/stats",
			Help: "Announces, scrapes and peers across every torrent."},
		{Title: "Top torrents", Kind: plugins.SectionTable, Path: "/top", Rows: "torrents",
			Help: "The torrents with the most seeders (or leechers, or completions).",
			Fields: []plugins.PageField{{Name: "by", Label: "by (seeders, leechers, completed)", In: plugins.FieldInQuery},
				{Name: "n", Label: "how many", In: plugins.FieldInQuery, Type: "number"}}},
		{Title: "Show a torrent", Kind: plugins.SectionForm, Method: http.MethodGet, Path: "/torrents/{infohash}",
			Fields: []plugins.PageField{{Name: "infohash", Label: "info hash (40 hex)", In: plugins.FieldInPath, Required: true}}},
		{Title: "Register a torrent", Kind: plugins.SectionForm, Method: http.MethodPut, Path: "/torrents/{infohash}",
			Help: "The site's id of the torrent, its uploader, what it is worth to the site (the reaper's reward) and its size in bytes (the over-download cheat signal).",
			Fields: []plugins.PageField{{Name: "infohash", Label: "info hash (40 hex)", In: plugins.FieldInPath, Required: true},
				{Name: "id", Required: true}, {Name: "uploader"}, {Name: "value", Type: "number"}, {Name: "size", Type: "number"}}},
		{Title: "Unregister a torrent", Kind: plugins.SectionForm, Method: http.MethodDelete, Path: "/torrents/{infohash}",
			Fields: []plugins.PageField{{Name: "infohash", Label: "info hash (40 hex)", In: plugins.FieldInPath, Required: true}}},
	}},
	{Name: "users", Title: "Users and clients", Sections: []plugins.PageSection{
		{Title: "Show a user", Kind: plugins.SectionForm, Method: http.MethodGet, Path: "/users/by-id/{user_id}",
			Fields: []plugins.PageField{{Name: "user_id", Label: "user id", In: plugins.FieldInPath, Required: true}}},
		{Title: "Add a user", Kind: plugins.SectionForm, Method: http.MethodPut, Path: "/users/{passkey}",
			Help:   "The passkey is the secret in the user's announce URL; answers show it redacted.",
			Fields: []plugins.PageField{{Name: "passkey", In: plugins.FieldInPath, Required: true}, {Name: "user_id", Label: "user id", Required: true}}},
		{Title: "Remove a user", Kind: plugins.SectionForm, Method: http.MethodDelete, Path: "/users/{passkey}",
			Fields: []plugins.PageField{{Name: "passkey", In: plugins.FieldInPath, Required: true}}},
		{Title: "Client whitelist", Kind: plugins.SectionTable, Path: "/clients", Rows: "clients",
			Help: "Peer id prefixes allowed to announce (an empty list allows every client)."},
	}},
	{Name: "scoring", Title: "Scoring", Sections: []plugins.PageSection{
		{Title: "Top scores", Kind: plugins.SectionTable, Path: "/scores/top", Rows: "torrents",
			Help:   "The torrents most in need of seeders, by their last score.",
			Fields: []plugins.PageField{{Name: "n", Label: "how many", In: plugins.FieldInQuery, Type: "number"}}},
		{Title: "A torrent's score", Kind: plugins.SectionForm, Method: http.MethodGet, Path: "/torrents/{infohash}/score",
			Fields: []plugins.PageField{{Name: "infohash", Label: "info hash (40 hex)", In: plugins.FieldInPath, Required: true}}},
	}},
	{Name: "reaper", Title: "Reaper", Sections: []plugins.PageSection{
		{Title: "Torrents per state", Kind: plugins.SectionObject, Path: "/reaper/counts",
			Help: "As of the last run, and the steps done."},
		{Title: "Next run", Kind: plugins.SectionObject, Path: "/reaper/preview",
			Help: "What the next run would do; changes nothing."},
		{Title: "A torrent's reaper state", Kind: plugins.SectionForm, Method: http.MethodGet, Path: "/reaper/torrents/{infohash}",
			Fields: []plugins.PageField{{Name: "infohash", Label: "info hash (40 hex)", In: plugins.FieldInPath, Required: true}}},
		{Title: "Extend", Kind: plugins.SectionForm, Method: http.MethodPost, Path: "/reaper/extend",
			Help:   "Give one torrent, or every torrent of a user, more days before it is reaped.",
			Fields: []plugins.PageField{{Name: "info_hash", Label: "info hash"}, {Name: "user"}, {Name: "days", Type: "number", Required: true}}},
	}},
	{Name: "outbox", Title: "Outbox", Sections: []plugins.PageSection{
		{Title: "Counts", Kind: plugins.SectionObject, Path: "/outbox/stats"},
		{Title: "Events", Kind: plugins.SectionTable, Path: "/outbox/events", Rows: "events",
			Help:   "Events waiting for the site, oldest first.",
			Fields: []plugins.PageField{{Name: "after", In: plugins.FieldInQuery}, {Name: "limit", In: plugins.FieldInQuery, Type: "number"}}},
		{Title: "Dead events", Kind: plugins.SectionTable, Path: "/outbox/dead", Rows: "events",
			Help:   "Events that failed delivery too often.",
			Fields: []plugins.PageField{{Name: "after", In: plugins.FieldInQuery}, {Name: "limit", In: plugins.FieldInQuery, Type: "number"}}},
		{Title: "Retry every dead event", Kind: plugins.SectionForm, Method: http.MethodPost, Path: "/outbox/dead/retry",
			Fields: []plugins.PageField{{Name: "all", Label: "all (tick to confirm)", Type: "bool", Required: true}}},
	}},
}
