package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/hoardproject/hoard/queues"
	"github.com/hoardproject/hoard/server"
)

func queueCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "queue", Short: "Queue items and read queue counts"}
	cmd.AddCommand(queueAddCommand(), moveCommand(), queueExportCommand(), importUniversalCommand(), &cobra.Command{
		Use:   "counts <slug>",
		Short: "Show how many items are in each place",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var c queues.Counts
			if err := newAdminClient().do(cmd.Context(), http.MethodGet, "/projects/"+args[0]+"/counts", nil, &c); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, row := range []struct {
				name string
				n    int64
			}{
				{"todo", c.Todo}, {"todo:backfeed", c.Backfeed}, {"todo:secondary", c.Secondary}, {"todo:redo", c.Redo},
				{"todo:reserved", c.Reserved}, {"todo:scored", c.Scored}, {"  offloaded", c.Offloaded}, {"out", c.Out}, {"  reclaimable", c.Reclaimable}, {"done", c.Done},
			} {
				fmt.Fprintf(w, "%-15s %12d\n", row.name, row.n)
			}
			if c.Out > 0 {
				age := time.Duration(c.OldestClaimAgeSeconds * float64(time.Second)).Round(time.Second)
				fmt.Fprintf(w, "%-15s %12s\n", "  oldest claim", age)
			}
			return nil
		},
	})
	return cmd
}

type addOptions struct {
	queue      string
	downloader string
	batch      int
	strict     bool
	jsonLines  bool
	register   bool
}

func queueAddCommand() *cobra.Command {
	var o addOptions
	cmd := &cobra.Command{
		Use:   "add <slug> [file|-]",
		Short: "Queue items from a file or stdin, one per line",
		Long: "Queue items from a file or stdin (\"-\" or no argument), one item per line, in batches.\n" +
			"Blank lines are ignored; malformed lines (NUL, over-long, bad UTF-8) are skipped and counted,\n" +
			"or stop the run with --strict. With --jsonl each line is {\"name\": ..., \"extras\": {...}}.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "-"
			if len(args) == 2 {
				path = args[1]
			}
			return runQueueAdd(cmd.Context(), args[0], path, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.queue, "queue", "todo", "todo, backfeed, secondary or redo")
	f.StringVar(&o.downloader, "downloader", "", "queue into this downloader's reserved queue instead")
	f.IntVar(&o.batch, "batch", 10000, "items per request")
	f.BoolVar(&o.strict, "strict", false, "stop at the first malformed line instead of skipping it")
	f.BoolVar(&o.jsonLines, "jsonl", false, "lines are JSON objects {\"name\", \"extras\"}")
	f.BoolVar(&o.register, "register", false, "also register the items in the backfeed Bloom filter, so backfeed never queues them again (items it has seen are skipped)")
	return cmd
}

// addTally counts what queue add did; it is read by the progress line.
type addTally struct {
	lines, queued, skipped, alreadyQueued, alreadyRegistered, rejected, blank, filtered, bytesRead atomic.Int64
}

func runQueueAdd(ctx context.Context, slug, path string, o addOptions) error {
	if o.batch < 1 || o.batch > queues.MaxEnqueueBatch {
		return fmt.Errorf("--batch must be between 1 and %d", queues.MaxEnqueueBatch)
	}
	var input io.Reader = os.Stdin
	var size int64
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		if info, err := file.Stat(); err == nil {
			size = info.Size()
		}
		input = file
	}
	client := newAdminClient()
	var tally addTally
	stopProgress := startProgress(&tally, size)
	defer stopProgress()

	send := func(batch []json.RawMessage) error {
		var resp server.AddItemsResponse
		req := map[string]any{"queue": o.queue, "downloader": o.downloader, "items": batch, "register": o.register}
		if err := client.do(ctx, http.MethodPost, "/projects/"+slug+"/items", req, &resp); err != nil {
			return err
		}
		tally.queued.Add(int64(resp.Queued))
		tally.skipped.Add(int64(resp.Skipped))
		tally.alreadyQueued.Add(int64(resp.AlreadyQueued))
		tally.alreadyRegistered.Add(int64(resp.AlreadyRegistered))
		tally.rejected.Add(int64(resp.Rejected))
		tally.filtered.Add(int64(resp.Filtered))
		return nil
	}
	reader := bufio.NewReaderSize(input, 1<<20)
	batch := make([]json.RawMessage, 0, o.batch)
	var firstRejects []string
	reject := func(line int64, why string) error {
		tally.rejected.Add(1)
		if o.strict {
			return fmt.Errorf("line %d: %s (stopped by --strict; the lines before it were queued)", line, why)
		}
		if len(firstRejects) < 5 {
			firstRejects = append(firstRejects, fmt.Sprintf("line %d: %s", line, why))
		}
		return nil
	}
	for {
		line, tooLong, err := readLine(reader, queues.MaxItemBytes+2)
		if len(line) > 0 || tooLong || err == nil {
			n := tally.lines.Add(1)
			tally.bytesRead.Add(int64(len(line)) + 1)
			text := strings.TrimSuffix(string(line), "\r")
			switch {
			case tooLong:
				if rerr := reject(n, fmt.Sprintf("longer than %d bytes", queues.MaxItemBytes)); rerr != nil {
					return rerr
				}
			case strings.TrimSpace(text) == "":
				tally.blank.Add(1)
			default:
				entry, why := parseAddLine(text, o.jsonLines)
				if why != "" {
					if rerr := reject(n, why); rerr != nil {
						return rerr
					}
					break
				}
				batch = append(batch, entry)
				if len(batch) == o.batch {
					if err := send(batch); err != nil {
						return err
					}
					batch = batch[:0]
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if len(batch) > 0 {
		if err := send(batch); err != nil {
			return err
		}
	}
	stopProgress()
	target := o.queue
	if o.downloader != "" {
		target = "todo:d:" + o.downloader
	}
	registered := ""
	if o.register {
		registered = fmt.Sprintf(", %d already registered", tally.alreadyRegistered.Load())
	}
	fmt.Printf("queued %d items into %s of %s; skipped %d malformed and %d blank lines; not queued again: %d already queued, %d already out or done%s; %d dropped by the project's filters\n",
		tally.queued.Load(), target, slug, tally.rejected.Load(), tally.blank.Load(),
		tally.alreadyQueued.Load(), tally.skipped.Load(), registered, tally.filtered.Load())
	for _, r := range firstRejects {
		fmt.Fprintln(os.Stderr, "  skipped", r)
	}
	return nil
}

// parseAddLine turns one line into an item for the API, or says why not.
func parseAddLine(text string, jsonLines bool) (json.RawMessage, string) {
	if !jsonLines {
		if err := queues.ValidateNewItem(text); err != nil {
			return nil, queueErrorMessage(err)
		}
		raw, _ := json.Marshal(text)
		return raw, ""
	}
	var item queues.QueueItem
	if err := json.Unmarshal([]byte(text), &item); err != nil {
		return nil, "not a JSON object {\"name\", \"extras\"}"
	}
	if err := queues.ValidateNewItem(item.Name); err != nil {
		return nil, queueErrorMessage(err)
	}
	raw, _ := json.Marshal(item)
	return raw, ""
}

func queueErrorMessage(err error) string {
	var qe *queues.Error
	if errors.As(err, &qe) {
		return qe.Message
	}
	return err.Error()
}

// readLine reads one line without its newline. A line longer than max is
// consumed whole and reported as tooLong, so memory stays bounded whatever
// the input holds.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	var buf bytes.Buffer
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			buf.Write(chunk)
			if buf.Len() > max+1 {
				tooLong = true
				buf.Reset()
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), false, err
	}
}

// startProgress draws a progress line on stderr when it is a terminal and
// returns a function that erases it (safe to call twice).
func startProgress(t *addTally, size int64) func() {
	info, err := os.Stderr.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		ticker := time.NewTicker(200 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(os.Stderr, "\r\033[K")
				return
			case <-ticker.C:
				rate := float64(t.queued.Load()) / time.Since(start).Seconds()
				pct := ""
				if size > 0 {
					pct = fmt.Sprintf(" %3.0f%%", 100*float64(t.bytesRead.Load())/float64(size))
				}
				fmt.Fprintf(os.Stderr, "\r\033[K%s %d lines read, %d queued, %d skipped, %.0f items/s",
					pct, t.lines.Load(), t.queued.Load(), t.rejected.Load(), rate)
			}
		}
	}()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(done)
			<-finished
		}
	}
}
