package swarm

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

// convertCredit converts every user-torrent record and every user's
// totals written by a build that stored the credited transfer whole to
// the form kept since s43, its difference from the raw transfer
// (credit_convert.lua), then marks the keyspace converted
// (btstore.CreditFormKey). Start runs it before the frontend serves, so
// no announce of this build ever reads an old record: the conversion is
// paid once, where the state is set, and the announce reads two fields it
// read before (prelude's user_read) with no check of the record's form.
// The alternative, a version field the script consults on every
// announce, would cost every announce a field and a comparison forever.
//
// It is idempotent and resumable: each record is converted by one script
// that leaves the new fields present, and a record that has them is left
// alone, so a frontend killed half-way, or two frontends starting at
// once, convert each record once. Frontends of an older build must not
// run beside this one while records are converted or after (they would
// write whole figures into converted records): upgrade them all at once.
func (s *Store) convertCredit(ctx context.Context) error {
	done, err := s.rdb.Get(ctx, btstore.CreditFormKey).Result()
	if err == nil && done == btstore.CreditFormDone {
		return nil
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("swarm: credit form: %w", err)
	}
	converted := 0
	for _, pattern := range []string{btstore.UserTorrentPattern, btstore.UserStatsPattern} {
		err := s.scanKeys(ctx, pattern, func(keys []string) error {
			calls := make([]scriptCall, len(keys))
			for i, key := range keys {
				calls[i] = scriptCall{keys: btstore.CreditConvertKeys(key)}
			}
			for _, cmd := range s.runScriptsPipelined(ctx, creditConvertScript, calls) {
				n, err := cmd.Int64()
				if err != nil {
					return err
				}
				if n > 0 {
					converted++
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("swarm: credit form: converting %s: %w", pattern, err)
		}
	}
	if err := s.rdb.Set(ctx, btstore.CreditFormKey, btstore.CreditFormDone, 0).Err(); err != nil {
		return fmt.Errorf("swarm: credit form: %w", err)
	}
	if converted > 0 {
		s.logger.Info("swarm: credited transfer converted to its difference from the raw transfer", "records", converted)
	}
	return nil
}
