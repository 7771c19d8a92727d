package swarm

import (
	"context"
	"fmt"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/hoardproject/hoard/plugins/bittorrent"
)

// errUnregistered refuses an announce of a torrent that is not
// registered (private mode) and whose deletion reason, if it had one, is
// over.
var errUnregistered = &bittorrent.ClientError{Reason: "unregistered torrent"}

// FloodReport is one repeat offender of flood control: a peer refused
// Config.FloodReportAfter times within Config.FloodWindow, reported once
// per window.
type FloodReport struct {
	InfoHash  bittorrent.InfoHash
	TorrentID string // the site's id, "" in open mode
	UserID    string // "" in open mode
	PeerID    bittorrent.PeerID
	Addr      netip.AddrPort
	Refusals  int64     // in this window, so far
	Since     time.Time // the window's start
}

// flood counts a refusal by flood control and reports a repeat
// offender. It returns the refusal the client reads.
func (s *Store) flood(ctx context.Context, req *bittorrent.AnnounceRequest, userID string, reply []any) error {
	s.counters.floodRefused.Add(1)
	if len(reply) >= 5 && replyInt(reply[2]) == 1 {
		s.counters.floodReported.Add(1)
		if s.cfg.OnFlood != nil {
			s.cfg.OnFlood(ctx, FloodReport{
				InfoHash: req.InfoHash, TorrentID: replyString(reply[4]), UserID: userID,
				PeerID: req.PeerID, Addr: req.Addr, Refusals: replyInt(reply[1]),
				Since: time.UnixMilli(replyInt(reply[3])).UTC(),
			})
		}
	}
	return &bittorrent.ClientError{Reason: fmt.Sprintf(
		"announcing too often: wait at least %d seconds between announces (min interval)", int64(s.cfg.MinInterval/time.Second))}
}

// FloodRefused counts the announces this Store refused by flood control;
// FloodReported the repeat offenders it reported.
func (s *Store) FloodRefused() int64 { return s.counters.floodRefused.Load() }

// FloodReported: see FloodRefused.
func (s *Store) FloodReported() int64 { return s.counters.floodReported.Load() }

// MaxReasonBytes bounds a deletion or deny reason: clients show it in
// one line.
const MaxReasonBytes = 200

// CheckReason checks a reason the site or an operator gives (a
// deletion's, a deny list entry's): clients show it to their users, so it
// is 1-MaxReasonBytes bytes of UTF-8 with no control character (C0 but
// tab, DEL, C1), which a terminal or a log would act on.
func CheckReason(reason string) error {
	if reason == "" || len(reason) > MaxReasonBytes {
		return fmt.Errorf("swarm: reason: want 1-%d bytes, got %d: %w", MaxReasonBytes, len(reason), ErrInvalid)
	}
	if !utf8.ValidString(reason) {
		return fmt.Errorf("swarm: reason: not valid UTF-8: %w", ErrInvalid)
	}
	for i, r := range reason {
		if (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return fmt.Errorf("swarm: reason has the control character U+%04X at byte offset %d: %w", r, i, ErrInvalid)
		}
	}
	return nil
}
