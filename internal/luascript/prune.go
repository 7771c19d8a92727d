package luascript

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// libraryPrefix starts the name of every library hoard loads (see
// newScript). Prune deletes no library without it.
const libraryPrefix = "hoard_"

// PruneReport is what Prune did: the names of the hoard libraries it
// deleted and of those it kept, each once however many masters held it.
type PruneReport struct {
	Deleted []string `json:"deleted"`
	Kept    []string `json:"kept"`
}

// Prune deletes, on every master, every function library named hoard_…
// that is not one of keep's (a build's scripts are new libraries, so
// earlier builds' stay in Redis until deleted). It is safe beside traffic:
// a process whose library it deleted (another hoard version in a rolling
// upgrade, a plugin process) gets "Function not found" at its next call,
// which did not run, and loads its library and sends the call again (see
// Run). Libraries not named hoard_… are never touched. A server without
// functions has nothing to prune: an empty report.
func Prune(ctx context.Context, rdb redis.UniversalClient, keep []*Script) (PruneReport, error) {
	keepNames := make(map[string]bool, len(keep))
	for _, s := range keep {
		keepNames[s.name] = true
	}
	var mu sync.Mutex
	deleted, kept := map[string]bool{}, map[string]bool{}
	prune := func(ctx context.Context, node redis.Cmdable) error {
		libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: libraryPrefix + "*"}).Result()
		if noFunctions(err) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, lib := range libs {
			name := lib.Name
			if !strings.HasPrefix(name, libraryPrefix) { // the pattern is a glob: check it exactly
				continue
			}
			if keepNames[name] {
				mu.Lock()
				kept[name] = true
				mu.Unlock()
				continue
			}
			// "not found": another Prune deleted it first.
			if err := node.FunctionDelete(ctx, name).Err(); err != nil && !strings.Contains(err.Error(), "not found") {
				return err
			}
			mu.Lock()
			deleted[name] = true
			mu.Unlock()
		}
		return nil
	}
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return prune(ctx, node) })
	} else {
		err = prune(ctx, rdb)
	}
	report := PruneReport{Deleted: sortedKeys(deleted), Kept: sortedKeys(kept)}
	return report, err
}

func sortedKeys(set map[string]bool) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
