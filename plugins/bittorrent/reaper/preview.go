package reaper

import (
	"github.com/hoardproject/hoard/plugins/bittorrent/btstore"

	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// PreviewStep is one step the next run would queue.
type PreviewStep struct {
	Step      Step      `json:"step"`
	InfoHash  string    `json:"info_hash"`
	TorrentID string    `json:"torrent_id"`
	Uploader  string    `json:"uploader"`
	State     string    `json:"state"`     // never or unseeded
	DueSince  time.Time `json:"due_since"` // when its gap passed
	Item      string    `json:"item"`      // the item name it would be queued as (an initial's epoch is the run's time)
}

// PreviewReward is a torrent whose claims the next run would reward.
type PreviewReward struct {
	InfoHash string   `json:"info_hash"`
	Users    []string `json:"users"`
	Points   float64  `json:"points"` // each
}

// Preview is what the next run would do, were it now.
type Preview struct {
	At       time.Time        `json:"at"`
	Steps    []PreviewStep    `json:"steps"`     // in the order the run takes them, within the caps
	Due      int              `json:"due"`       // steps due now, capped or not
	LeftOver int              `json:"left_over"` // due steps the caps leave to later runs
	Users    int              `json:"users"`     // uploaders the run would notify
	Rewards  []PreviewReward  `json:"rewards"`
	States   map[string]int64 `json:"states"` // torrents in each state now
}

// Preview computes what the next run would do, changing nothing (not
// even the retry of a failed registry cleanup that Plan does).
func (r *Reaper) Preview(ctx context.Context) (Preview, error) {
	now := r.cfg.Now()
	found, err := r.scan(ctx, now, false)
	if err != nil {
		return Preview{}, err
	}
	taken, left := r.capped(found.due)
	p := Preview{At: now.UTC(), Steps: []PreviewStep{}, Due: len(found.due), LeftOver: left, Rewards: []PreviewReward{},
		States: map[string]int64{}}
	users := map[string]bool{}
	for _, d := range taken {
		users[d.uploader] = true
		p.Steps = append(p.Steps, PreviewStep{Step: d.item.Step, InfoHash: btstore.HexInfoHash(d.item.InfoHash), TorrentID: d.torrentID,
			Uploader: d.uploader, State: d.state, DueSince: d.at.UTC(), Item: d.item.Name()})
	}
	p.Users = len(users)
	for _, name := range stateCounts {
		p.States[name] = found.counts[name]
	}
	for _, hash := range found.settle {
		claims, err := r.rdb.HGetAll(ctx, btstore.ReaperClaimsKey(hash)).Result()
		if err != nil {
			return Preview{}, fmt.Errorf("reaper.Preview: %w", err)
		}
		value, err := r.rdb.HGet(ctx, btstore.TorrentKey(hash), "value").Float64()
		if err != nil || value <= 0 {
			value = 1
		}
		var waiting []string
		for user, v := range claims {
			if strings.HasPrefix(v, "c:") {
				waiting = append(waiting, user)
			}
		}
		if len(waiting) == 0 {
			continue
		}
		slices.Sort(waiting)
		p.Rewards = append(p.Rewards, PreviewReward{InfoHash: btstore.HexInfoHash(hash), Users: waiting,
			Points: r.cfg.Policy.RewardFactor * value})
	}
	return p, nil
}
