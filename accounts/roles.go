package accounts

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/hoardproject/hoard/plugins"
	"github.com/hoardproject/hoard/queues"
)

// A role is written as text, the way the API, the CLI and the log show it:
//
//	admin                      everything, accounts included
//	project-admin:<slug>       everything about that project
//	viewer:<slug>              read-only admin views of that project
//	viewer:*                   read-only admin views of every project
//	plugin:<name>:<scope>      what the plugin declares the scope may do
//	                           with its own API (plugins.AdminScope)

// Role kinds.
const (
	KindAdmin        = "admin"
	KindProjectAdmin = "project-admin"
	KindViewer       = "viewer"
	KindPlugin       = "plugin"
)

// AllProjects is the project of a viewer of every project.
const AllProjects = "*"

// Role is one parsed role.
type Role struct {
	Kind string
	// Project is the slug of a project-admin or viewer role (AllProjects
	// for a viewer of all).
	Project string
	// Plugin and Scope name a plugin role.
	Plugin, Scope string
}

func (r Role) String() string {
	switch r.Kind {
	case KindAdmin:
		return KindAdmin
	case KindPlugin:
		return KindPlugin + ":" + r.Plugin + ":" + r.Scope
	}
	return r.Kind + ":" + r.Project
}

var scopePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// ParseRole reads one role; the error says what a role looks like.
func ParseRole(s string) (Role, error) {
	kind, rest, _ := strings.Cut(s, ":")
	switch kind {
	case KindAdmin:
		if rest != "" || strings.Contains(s, ":") {
			return Role{}, invalid("role %q: admin takes no project", s)
		}
		return Role{Kind: KindAdmin}, nil
	case KindProjectAdmin, KindViewer:
		if rest == "" {
			return Role{}, invalid("role %q names no project: write %s:<project>", s, kind)
		}
		if rest == AllProjects && kind == KindViewer {
			return Role{Kind: kind, Project: AllProjects}, nil
		}
		if err := queues.ValidateSlug(rest); err != nil {
			return Role{}, invalid("role %q: %s", s, queuesMessage(err))
		}
		return Role{Kind: kind, Project: rest}, nil
	case KindPlugin:
		name, scope, ok := strings.Cut(rest, ":")
		if !ok {
			return Role{}, invalid("role %q: write plugin:<name>:<scope>", s)
		}
		if err := plugins.ValidateName(name); err != nil {
			return Role{}, invalid("role %q: %v", s, err)
		}
		if !scopePattern.MatchString(scope) {
			return Role{}, invalid("role %q: a scope is 1-32 of a-z, 0-9, _ and -, starting with a letter", s)
		}
		return Role{Kind: KindPlugin, Plugin: name, Scope: scope}, nil
	}
	return Role{}, invalid("unknown role %q: want admin, project-admin:<project>, viewer:<project>, viewer:* or plugin:<name>:<scope>", s)
}

// ParseRoles reads a list of roles, refusing duplicates.
func ParseRoles(list []string) ([]Role, error) {
	out := make([]Role, 0, len(list))
	seen := map[string]bool{}
	for _, s := range list {
		r, err := ParseRole(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		if seen[r.String()] {
			return nil, invalid("role %q is listed twice", r.String())
		}
		seen[r.String()] = true
		out = append(out, r)
	}
	return out, nil
}

func queuesMessage(err error) string {
	if qe, ok := err.(*queues.Error); ok {
		return qe.Message
	}
	return err.Error()
}

// Roles is an account's set of roles, with the questions the server asks.
type Roles []Role

// Admin reports whether the roles include admin.
func (rs Roles) Admin() bool {
	for _, r := range rs {
		if r.Kind == KindAdmin {
			return true
		}
	}
	return false
}

// CanWrite reports whether the roles may change project slug.
func (rs Roles) CanWrite(slug string) bool {
	for _, r := range rs {
		if r.Kind == KindAdmin || (r.Kind == KindProjectAdmin && r.Project == slug) {
			return true
		}
	}
	return false
}

// CanRead reports whether the roles may read project slug's admin views.
func (rs Roles) CanRead(slug string) bool {
	if rs.CanWrite(slug) {
		return true
	}
	for _, r := range rs {
		if r.Kind == KindViewer && (r.Project == slug || r.Project == AllProjects) {
			return true
		}
	}
	return false
}

// ReadsAll reports whether the roles may read every project (admin or
// viewer:*), and so the global views (the whole admin log, global blocks).
func (rs Roles) ReadsAll() bool {
	for _, r := range rs {
		if r.Kind == KindAdmin || (r.Kind == KindViewer && r.Project == AllProjects) {
			return true
		}
	}
	return false
}

// PluginScopes are the scopes the roles hold in plugin name.
func (rs Roles) PluginScopes(name string) []string {
	var out []string
	for _, r := range rs {
		if r.Kind == KindPlugin && r.Plugin == name {
			out = append(out, r.Scope)
		}
	}
	return out
}

// Strings writes the roles as text.
func (rs Roles) Strings() []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// Describe names the roles for a refusal ("viewer:shop, project-admin:x").
func (rs Roles) Describe() string {
	if len(rs) == 0 {
		return "no role"
	}
	return strings.Join(rs.Strings(), ", ")
}

func invalid(format string, args ...any) error {
	return &Error{Kind: ErrInvalid, Message: fmt.Sprintf(format, args...)}
}
