package pluginhost

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hoardproject/hoard/plugins"
)

// A plugin's item types are its work, not the public's: the public warrior
// API hands their items out only when the plugin declares a type public
// (plugins.ItemType.Public), or to an outside worker (the site's) that
// shows a token the operator scoped to the plugin's types. The projects
// they live in are left off the public project lists.

// ProjectOwner is the plugin whose item types live in a project.
type ProjectOwner struct {
	Plugin string      `json:"plugin"`
	Types  []OwnedType `json:"types"`
}

// OwnedType is one of the plugin's item types in the project.
type OwnedType struct {
	Name   string `json:"name"`
	Public bool   `json:"public,omitempty"`
}

// Public reports whether every type in the project is public, so anyone
// may claim its items.
func (o ProjectOwner) Public() bool {
	for _, t := range o.Types {
		if !t.Public {
			return false
		}
	}
	return true
}

// WorkerToken lets an outside worker use the warrior API on a plugin's
// item types that are not public: Types (all of the plugin's when empty).
type WorkerToken struct {
	Plugin string
	Types  []string
	Token  string
}

// MinWorkerTokenLen keeps worker tokens unguessable.
const MinWorkerTokenLen = 16

// ParseWorkerTokens reads `hoard serve --plugin-worker-token`:
// NAME=TOKEN (every item type of the plugin) or NAME:TYPE[,TYPE]=TOKEN.
func ParseWorkerTokens(specs []string) ([]WorkerToken, error) {
	var out []WorkerToken
	var errs []error
	for _, spec := range specs {
		scope, token, ok := strings.Cut(spec, "=")
		name, types, scoped := strings.Cut(scope, ":")
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("plugin worker token %q: want NAME=TOKEN or NAME:TYPE,TYPE=TOKEN", redact(spec)))
			continue
		case plugins.ValidateName(name) != nil:
			errs = append(errs, fmt.Errorf("plugin worker token: %w", plugins.ValidateName(name)))
			continue
		case len(token) < MinWorkerTokenLen:
			errs = append(errs, fmt.Errorf("plugin worker token for %q: at least %d characters", name, MinWorkerTokenLen))
			continue
		}
		wt := WorkerToken{Plugin: name, Token: token}
		if scoped {
			for _, t := range strings.Split(types, ",") {
				if t = strings.TrimSpace(t); t != "" {
					wt.Types = append(wt.Types, t)
				}
			}
			if len(wt.Types) == 0 {
				errs = append(errs, fmt.Errorf("plugin worker token for %q: %q names no item type", name, scope))
				continue
			}
		}
		out = append(out, wt)
	}
	return out, errors.Join(errs...)
}

func redact(spec string) string {
	scope, _, _ := strings.Cut(spec, "=")
	return scope + "=…"
}

// covers reports whether the token may work every closed type of owner.
func (w WorkerToken) covers(owner ProjectOwner) bool {
	if w.Plugin != owner.Plugin {
		return false
	}
	for _, t := range owner.Types {
		if !t.Public && len(w.Types) > 0 && !slices.Contains(w.Types, t.Name) {
			return false
		}
	}
	return true
}

// WarriorAccess tells the public warrior API whether a plugin owns the
// project (owned, and which plugin), and whether the caller may work it:
// every type in it is public, or bearer is a worker token that covers
// them. A project no plugin owns is the public's.
func (h *Host) WarriorAccess(project, bearer string) (plugin string, owned, allowed bool) {
	h.ownedMu.RLock()
	owner, owned := h.owned[project]
	h.ownedMu.RUnlock()
	if !owned {
		return "", false, true
	}
	if owner.Public() {
		return owner.Plugin, true, true
	}
	for _, wt := range h.opts.WorkerTokens {
		if subtle.ConstantTimeCompare([]byte(bearer), []byte(wt.Token)) == 1 && wt.covers(owner) {
			return owner.Plugin, true, true
		}
	}
	return owner.Plugin, true, false
}

// PrivateProject reports whether a plugin owns the project and keeps it
// from the public: the index page and projects.json leave it off.
func (h *Host) PrivateProject(project string) bool {
	h.ownedMu.RLock()
	owner, owned := h.owned[project]
	h.ownedMu.RUnlock()
	return owned && !owner.Public()
}

// ownersOf is what desc says of each project its types live in.
func ownersOf(plugin string, desc plugins.Description) map[string]ProjectOwner {
	out := map[string]ProjectOwner{}
	for _, t := range desc.ItemTypes {
		o := out[t.Project]
		o.Plugin = plugin
		o.Types = append(o.Types, OwnedType{Name: t.Name, Public: t.Public})
		out[t.Project] = o
	}
	return out
}

// recordOwners keeps what a plugin's description says of its projects,
// here and in Redis for the other frontends. A failed write is logged: this
// frontend knows, and the plugin's next start writes it again.
func (h *Host) recordOwners(ctx context.Context, plugin string, desc plugins.Description) {
	owners := ownersOf(plugin, desc)
	h.ownedMu.Lock()
	for project, o := range owners {
		h.owned[project] = o
	}
	h.ownedMu.Unlock()
	if h.opts.Redis == nil || len(owners) == 0 {
		return
	}
	fields := make(map[string]any, len(owners))
	for project, o := range owners {
		raw, _ := json.Marshal(o)
		fields[project] = string(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	if err := h.opts.Redis.HSet(ctx, ownedProjectsKey, fields).Err(); err != nil {
		h.log.Warn("cannot record the plugin's projects for the other frontends", "plugin", plugin, "err", err)
	}
}

// loadOwners reads every plugin's projects as recorded by any frontend.
func (h *Host) loadOwners(ctx context.Context) error {
	if h.opts.Redis == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	all, err := h.opts.Redis.HGetAll(ctx, ownedProjectsKey).Result()
	if err != nil {
		return err
	}
	h.ownedMu.Lock()
	defer h.ownedMu.Unlock()
	for project, raw := range all {
		var o ProjectOwner
		if json.Unmarshal([]byte(raw), &o) == nil && o.Plugin != "" {
			h.owned[project] = o
		}
	}
	return nil
}

// OwnersRefresh is how often a host reads the projects other frontends'
// plugins recorded.
const OwnersRefresh = 30 * time.Second

// refreshOwners reads the recorded projects now and every OwnersRefresh
// until ctx ends.
func (h *Host) refreshOwners(ctx context.Context) {
	defer h.wg.Done()
	for {
		if err := h.loadOwners(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("cannot read the plugins' projects", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-h.opts.Clock.After(OwnersRefresh):
		}
	}
}
