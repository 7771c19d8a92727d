package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/plugins"
)

// PluginPages is one plugin's views in the web admin, as GET
// /api/v1/plugin-pages lists them for the caller.
type PluginPages struct {
	Name  string              `json:"name"`
	State string              `json:"state"`
	Pages []plugins.AdminPage `json:"pages"`
}

// pluginPages serves GET /api/v1/plugin-pages: the pages each plugin
// declares (Description.AdminPages, kept by the host while the plugin is
// down), with only the sections the caller's roles may call, so the page
// offers no control the API would refuse. The plugin's data is not here:
// the console reads each section from the plugin's own API through the
// forwarder, as the CLI does.
func (a *auth) pluginPages(source PluginSource) gin.HandlerFunc {
	return func(c *gin.Context) {
		out := []PluginPages{}
		if source == nil {
			c.JSON(http.StatusOK, gin.H{"plugins": out})
			return
		}
		p := principal(c)
		for _, st := range source.Status() {
			entry := PluginPages{Name: st.Name, State: string(st.State), Pages: []plugins.AdminPage{}}
			for _, page := range st.Description.AdminPages {
				shown := page
				shown.Sections = nil
				for _, s := range page.Sections {
					if mayCall(p, st.Description.AdminScopes, st.Name, s) {
						shown.Sections = append(shown.Sections, s)
					}
				}
				if len(shown.Sections) > 0 {
					entry.Pages = append(entry.Pages, shown)
				}
			}
			if len(entry.Pages) > 0 {
				out = append(out, entry)
			}
		}
		c.JSON(http.StatusOK, gin.H{"plugins": out})
	}
}

// mayCall reports whether p may make a section's call: the same check
// authorize makes of a forwarded call (admin, or a scope of the plugin
// that p holds and that opens the method on the path).
func mayCall(p accounts.Principal, declared []plugins.AdminScope, plugin string, s plugins.PageSection) bool {
	if p.Roles.Admin() {
		return true
	}
	for _, scope := range p.Roles.PluginScopes(plugin) {
		for _, d := range declared {
			if d.Name == scope && d.Allows(s.CallMethod(), s.SamplePath()) {
				return true
			}
		}
	}
	return false
}
