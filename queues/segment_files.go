package queues

// Segment files: naming, writing durably, reading, and the records that
// list them.

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const tmpSuffix = ".tmp"

func (o *Offloader) segmentDir(slug string, archive bool) string {
	if archive {
		return filepath.Join(o.Dir, "archive", slug)
	}
	return filepath.Join(o.Dir, "segments", slug)
}

func (o *Offloader) segmentPath(slug string, seg Segment) string {
	return filepath.Join(o.segmentDir(slug, seg.Queue == "done"), seg.ID+".gz")
}

// publishFile moves a synced file to its final name, durably.
func publishFile(tmp, final string) error {
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(filepath.Dir(final))
}

// writeSegment writes the staged items to a gzip file, one per line, and
// syncs it (the caller syncs the directory). The segment's id was just
// handed out, so a file already under that name is a stale leftover (of a
// crash, or of a Redis that lost its seq) and is replaced. It returns the
// items' fingerprints, for the segment's index.
func (o *Offloader) writeSegment(ctx context.Context, path, staging string, count int64) (fps []uint64, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	buffered := bufio.NewWriterSize(file, 256<<10)
	zw, err := gzip.NewWriterLevel(buffered, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	fps = make([]uint64, 0, count)
	for start := int64(0); start < count; start += segmentReadBatch {
		items, err := o.Engine.rdb.LRange(ctx, staging, start, min(start+segmentReadBatch, count)-1).Result()
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			if _, err := io.WriteString(zw, item); err != nil {
				return nil, err
			}
			if _, err := zw.Write([]byte{'\n'}); err != nil {
				return nil, err
			}
			fps = append(fps, itemFingerprint(item))
		}
	}
	if int64(len(fps)) != count {
		return nil, fmt.Errorf("staged %d items but read %d", count, len(fps))
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := buffered.Flush(); err != nil {
		return nil, err
	}
	return fps, file.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readSegment reads a segment file's items.
func readSegment(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(file, 256<<10))
	if err != nil {
		return nil, err
	}
	var items []string
	scanner := bufio.NewScanner(zr)
	scanner.Buffer(make([]byte, 64<<10), MaxItemBytes+2)
	for scanner.Scan() {
		items = append(items, scanner.Text())
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	return items, zr.Close()
}

// Segments lists a project's segment records, oldest first.
func (o *Offloader) Segments(ctx context.Context, slug string) ([]Segment, error) {
	if ValidateSlug(slug) != nil {
		return nil, errorf("queues.Segments", CodeProjectNotFound, "no project %q", slug)
	}
	records, err := o.Engine.rdb.HGetAll(ctx, SegmentsKey(slug)).Result()
	if err != nil {
		return nil, unavailable("queues.Segments", err)
	}
	segments := make([]Segment, 0, len(records))
	for id, record := range records {
		seg, err := parseSegment(id, record)
		if err != nil {
			o.logger().Error("damaged segment record", "project", slug, "err", err)
			continue
		}
		segments = append(segments, seg)
	}
	slices.SortFunc(segments, func(a, b Segment) int { return strings.Compare(a.ID, b.ID) })
	return segments, nil
}

// ownsFile says whether this frontend can refill a segment: it wrote it,
// or its file is in this data directory (a frontend that came back under
// another name, or frontends sharing one directory).
func (o *Offloader) ownsFile(slug string, seg Segment) bool {
	if seg.Node == o.node() {
		return true
	}
	_, err := os.Stat(o.segmentPath(slug, seg))
	return err == nil
}
