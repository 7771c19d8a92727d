package swarm

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/plugins/bittorrent"
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"
)

var _ bittorrent.FullScraper = (*Store)(nil)

// fullScrapePage is how many torrents' counts one pipelined read fetches.
const fullScrapePage = 512

// FullScrape calls each for every torrent with peers, in info-hash byte
// order: the torrents in the seeders and leechers indexes (which lag by
// the flush interval), with their counts read from their records page by
// page. In private mode unregistered torrents are left out, and denied
// torrents in either mode. Memory is 20 bytes per torrent listed (the
// hashes, sorted) and one page of counts.
func (s *Store) FullScrape(ctx context.Context, each func(bittorrent.InfoHash, bittorrent.ScrapeEntry) error) error {
	var hashes []bittorrent.InfoHash
	for _, index := range []btstore.Index{btstore.IndexSeeders, btstore.IndexLeechers} {
		iter := s.rdb.ZScan(ctx, btstore.IndexKey(index), 0, "", 1000).Iterator()
		for i := 0; iter.Next(ctx); i++ {
			if i%2 == 1 {
				continue // the score
			}
			if hash, ok := btstore.ParseHexInfoHash(iter.Val()); ok {
				hashes = append(hashes, hash)
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("swarm.FullScrape: %w", err)
		}
	}
	slices.SortFunc(hashes, func(a, b bittorrent.InfoHash) int { return bytes.Compare(a[:], b[:]) })
	hashes = slices.Compact(hashes)
	deny, err := s.denyLists(ctx)
	if err != nil {
		return err
	}
	cmds := make([]*redis.SliceCmd, 0, fullScrapePage)
	for start := 0; start < len(hashes); start += fullScrapePage {
		page := hashes[start:min(start+fullScrapePage, len(hashes))]
		pipe := s.rdb.Pipeline()
		cmds = cmds[:0]
		for _, hash := range page {
			cmds = append(cmds, pipe.HMGet(ctx, btstore.TorrentKey(hash), "seeders", "leechers", "snatches", "id"))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("swarm.FullScrape: %w", err)
		}
		for i, cmd := range cmds {
			v := cmd.Val()
			if s.cfg.Private && v[3] == nil {
				continue
			}
			if _, denied := deny.torrents[page[i]]; denied {
				continue
			}
			e := bittorrent.ScrapeEntry{Complete: replyInt(v[0]), Incomplete: replyInt(v[1]), Downloaded: replyInt(v[2])}
			if e.Complete+e.Incomplete == 0 {
				continue
			}
			if err := each(page[i], e); err != nil {
				return err
			}
		}
	}
	return nil
}
