package btstore

import (
	"context"
	"fmt"

	"github.com/hoardproject/hoard/internal/luascript"
)

// Orphan cleanup's compare-and-delete calls (package orphans decides
// what to try; these know which keys each script touches). Each takes
// pairs read elsewhere, a name and the stamp or id it had, and deletes an
// entry only if it still has it.

var (
	orphanUserScript     = Script("orphan_user.lua")
	orphanRegistryScript = Script("orphan_registry.lua")
	orphanRevsScript     = Script("orphan_revs.lua")
)

// DropUserEntries removes a user's set entries (its sets, versions and
// torrents maps) of the torrent ids in pairs (torrent id, version read),
// each only if its version is still the one read (orphan_user.lua). It
// returns how many went.
func DropUserEntries(ctx context.Context, rdb luascript.Processor, userID string, pairs []any) (int, error) {
	n, err := orphanUserScript.Run(ctx, rdb, UserStateKeys(userID), pairs...).Int()
	if err != nil {
		return 0, fmt.Errorf("btstore.DropUserEntries: %w", err)
	}
	return n, nil
}

// DropRegistryEntries removes registry entries of pairs (hex info-hash,
// id read), each only if it still names that id (orphan_registry.lua),
// and returns the hashes whose entries went.
func DropRegistryEntries(ctx context.Context, rdb luascript.Processor, pairs []any) ([]string, error) {
	deleted, err := orphanRegistryScript.Run(ctx, rdb, []string{RegistryKey}, pairs...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("btstore.DropRegistryEntries: %w", err)
	}
	return deleted, nil
}

// DropScoreRevisions removes a score index shard's revisions of pairs
// (hex info-hash, revision read), with their index entries, each only if
// the revision is still the one read (orphan_revs.lua), and returns how
// many went.
func DropScoreRevisions(ctx context.Context, rdb luascript.Processor, shard int, pairs []any) (int, error) {
	n, err := orphanRevsScript.Run(ctx, rdb, []string{ScoreIndexKey(shard), ScoreIndexRevsKey(shard)}, pairs...).Int()
	if err != nil {
		return 0, fmt.Errorf("btstore.DropScoreRevisions: %w", err)
	}
	return n, nil
}
