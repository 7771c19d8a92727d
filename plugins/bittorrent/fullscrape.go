package bittorrent

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/hoardproject/hoard/plugins/bittorrent/wire"
)

// FullScraper lists the counts of every torrent with peers, for a full
// scrape (a scrape with no info_hash).
type FullScraper interface {
	// FullScrape calls each for every torrent with peers, in info-hash
	// byte order (a bencoded dictionary's key order), reading them page by
	// page so its memory does not grow with the swarms. An error from
	// each stops it.
	FullScrape(ctx context.Context, each func(InfoHash, ScrapeEntry) error) error
}

// FullScrapeConfig turns full scrapes on for the HTTP listener, as
// opentracker serves them: one body, gzipped, built at most every Every
// and shared by every request meanwhile, and at most one per address per
// PerAddress. Source nil (the default) refuses full scrapes.
type FullScrapeConfig struct {
	Source FullScraper
	// Every is how long a built body is served (default 5m): a full
	// scrape costs a walk of every torrent with peers, so the tracker
	// pays it at most once per Every per frontend.
	Every time.Duration
	// PerAddress is the least time between two full scrapes from one
	// address (IPv4, or IPv6 /64) (default 1m).
	PerAddress time.Duration
	// MaxAddresses bounds the addresses remembered for PerAddress
	// (default 65536); when all are recent, new addresses are refused
	// until some age out.
	MaxAddresses int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Full scrape refusals.
var (
	errFullScrapeOff  = "scrape needs at least one info_hash: full scrapes are not served"
	errFullScrapeRate = "full scrape: at most one per %d seconds from one address; scrape single info_hashes meanwhile"
)

// fullScrape serves the cached full scrape body.
type fullScrape struct {
	cfg FullScrapeConfig

	mu       sync.Mutex
	body     []byte // gzip
	builtAt  time.Time
	building chan struct{} // closed when the running build ends
	last     map[netip.Addr]time.Time
}

func newFullScrape(cfg FullScrapeConfig) *fullScrape {
	if cfg.Source == nil {
		return nil
	}
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Minute
	}
	if cfg.PerAddress <= 0 {
		cfg.PerAddress = time.Minute
	}
	if cfg.MaxAddresses <= 0 {
		cfg.MaxAddresses = 65536
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &fullScrape{cfg: cfg, last: map[netip.Addr]time.Time{}}
}

// allow takes one full scrape from ip's allowance, or says no.
func (f *fullScrape) allow(ip netip.Addr) bool {
	owner := addressOwner(ip)
	now := f.cfg.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.last[owner]; ok && now.Sub(at) < f.cfg.PerAddress && !now.Before(at) {
		return false
	}
	if len(f.last) >= f.cfg.MaxAddresses {
		for a, at := range f.last {
			if now.Sub(at) >= f.cfg.PerAddress || now.Before(at) {
				delete(f.last, a)
			}
		}
		if len(f.last) >= f.cfg.MaxAddresses {
			return false
		}
	}
	f.last[owner] = now
	return true
}

// addressOwner is who a rate counts against: an IPv4 address, or an
// IPv6 address's /64.
func addressOwner(ip netip.Addr) netip.Addr {
	if ip.Is6() && !ip.Is4In6() {
		p, err := ip.Prefix(64)
		if err == nil {
			return p.Addr()
		}
	}
	return ip.Unmap()
}

// get returns the gzipped body: the cached one while it is younger than
// Every, else a new one. One request builds it; the others wait for that
// build, or are served the previous body while there is one.
func (f *fullScrape) get(ctx context.Context) ([]byte, error) {
	f.mu.Lock()
	for {
		now := f.cfg.Now()
		fresh := f.body != nil && now.Sub(f.builtAt) < f.cfg.Every && !now.Before(f.builtAt)
		if fresh || (f.body != nil && f.building != nil) {
			body := f.body
			f.mu.Unlock()
			return body, nil
		}
		if f.building == nil {
			break
		}
		wait := f.building
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.mu.Lock()
	}
	done := make(chan struct{})
	f.building = done
	f.mu.Unlock()
	body, err := f.build(ctx)
	f.mu.Lock()
	f.building = nil
	if err == nil {
		f.body, f.builtAt = body, f.cfg.Now()
	}
	f.mu.Unlock()
	close(done)
	return body, err
}

// build writes the whole bencoded response through gzip as the source
// streams the torrents: memory is the compressed body, not the torrents.
func (f *fullScrape) build(ctx context.Context) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	scratch := make([]byte, 0, 128)
	if _, err := io.WriteString(zw, wire.ScrapeHead); err != nil {
		return nil, err
	}
	err = f.cfg.Source.FullScrape(ctx, func(hash InfoHash, e ScrapeEntry) error {
		scratch = wire.AppendScrapeEntry(scratch[:0], hash, wire.ScrapeCounts{Complete: e.Complete, Incomplete: e.Incomplete, Downloaded: e.Downloaded})
		_, err := zw.Write(scratch)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("full scrape: %w", err)
	}
	if _, err := io.WriteString(zw, wire.ScrapeTail); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
