package queues

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func BenchmarkNewBlockedShape(b *testing.B) {
	for i := 0; i < b.N; i++ {
		blockedShapes.Clear()
		newBlockedShape(DefaultBloomCapacity, DefaultBloomFPRate, 0)
	}
}

// TestBlockedShapesAtTheDefaults pins what the default settings start: the
// memory per item is what docs/warrior-api.md states.
func TestBlockedShapesAtTheDefaults(t *testing.T) {
	for _, c := range []struct {
		fp    float64
		words uint
	}{{1e-6, 3}, {1e-4, 2}, {1e-3, 2}, {0.1, 2}, {1e-9, 4}} {
		shape := newBlockedShape(1_000_000, c.fp, 0)
		classic, _ := BloomParameters(1_000_000, c.fp)
		t.Logf("fp %g: %d words of k=%d, %.1f bits per item (classic %.1f)", c.fp, shape.words, shape.k, float64(shape.m)/1e6, float64(classic)/1e6)
		require.Equal(t, c.words, shape.words, "fp %g", c.fp)
		require.LessOrEqual(t, blockedFalsePositive(1e6, uint64(shape.m)/32, shape.words, shape.k), c.fp)
	}
}

// TestBlockedShapeMeetsItsRate fills a blocked generation, in Go, with the
// words and masks bloom_add.lua would be given, for capacity distinct
// items, then offers as many others and counts the false positives: the
// shape's model and the hashing together must give the configured rate
// (bounded: at 1e-4 30 expected, within 0.5x-1.5x; at 1e-6 at most 10x).
// 300k items each by default; 1M with HOARD_TEST_LONG=1.
// TestBloomFalsePositiveRate checks the same through Redis.
func TestBlockedShapeMeetsItsRate(t *testing.T) {
	n := 300_000
	if os.Getenv("HOARD_TEST_LONG") != "" {
		n = 1_000_000
	}
	for _, c := range []struct {
		capacity int
		fp       float64
		low      float64
	}{{n, 1e-4, 0.5}, {n, 1e-6, 0}} {
		shape := newBlockedShape(c.capacity, c.fp, 0)
		words := make([]uint32, shape.m/blockedWordBits)
		for i := range c.capacity {
			blockedWords(fmt.Sprintf("https://example.org/in/%d", i), shape, func(word uint64, mask uint32) {
				words[word] |= mask
			})
		}
		positives := 0
		for i := range c.capacity {
			all := true
			blockedWords(fmt.Sprintf("https://example.org/out/%d", i), shape, func(word uint64, mask uint32) {
				if words[word]&mask != mask {
					all = false
				}
			})
			if all {
				positives++
			}
		}
		rate := float64(positives) / float64(c.capacity)
		t.Logf("%d items at %g: %d words of k=%d, %.1f bits per item; %d false positives of %d (%.2g)",
			c.capacity, c.fp, shape.words, shape.k, float64(shape.m)/float64(c.capacity), positives, c.capacity, rate)
		require.LessOrEqual(t, rate, max(1.5*c.fp, 10*c.fp*(1-c.low)), "configured %g", c.fp)
		require.GreaterOrEqual(t, rate, c.low*c.fp, "the model is not that pessimistic at %g", c.fp)
	}
}

// FuzzParseBloomShapes: meta's shapes list is read by every frontend; a
// list it accepts must be one it would write (each shape's String), and
// anything else an error, never a panic.
func FuzzParseBloomShapes(f *testing.F) {
	f.Add("1000:20:1000")
	f.Add("1000:20:1000,423000000:4:10000000:w3")
	f.Add("64:4:10:w0")
	f.Add("96:40:10:w2,")
	f.Fuzz(func(t *testing.T, text string) {
		shapes, err := parseBloomShapes(text)
		if err != nil {
			return
		}
		parts := make([]string, len(shapes))
		for i, shape := range shapes {
			require.NotZero(t, shape.m)
			require.NotZero(t, shape.k)
			if shape.words > 0 {
				require.Zero(t, shape.m%blockedWordBits)
				require.LessOrEqual(t, shape.k, uint(blockedWordBits))
			}
			parts[i] = shape.String()
		}
		again, err := parseBloomShapes(strings.Join(parts, ","))
		require.NoError(t, err)
		require.Equal(t, shapes, again)
	})
}

// TestBlockedBatchNamesEachWordOnce: bloom_add.lua reads a batch's word
// list with one BITFIELD_RO and finds an item's words by their places in
// it, so the list must hold each word once, and each item's reference must
// decode to exactly the words and masks blockedWords gives it.
func TestBlockedBatchNamesEachWordOnce(t *testing.T) {
	shape := newBlockedShape(1000, 1e-6, 0) // few words: items share some
	batch := newBlockedBatch(shape, 0)
	refs := map[string]string{}
	items := make([]string, 500)
	for i := range items {
		items[i] = fmt.Sprintf("url:https://example.org/%d", i)
		refs[items[i]] = batch.item(items[i])
	}
	require.Equal(t, refs[items[7]], batch.item(items[7]), "an item twice names the same places")
	seen := map[uint64]bool{}
	for _, word := range batch.words {
		require.False(t, seen[word], "word %d listed twice", word)
		seen[word] = true
	}
	require.Less(t, len(batch.words), len(items)*int(shape.words), "items of this small shape share words, listed once")
	for _, item := range items {
		ref := []byte(refs[item])
		require.Len(t, ref, blockedWordRef*int(shape.words))
		w := 0
		blockedWords(item, shape, func(word uint64, mask uint32) {
			at := ref[w*blockedWordRef:]
			place := int(at[0])<<8 | int(at[1])
			require.Equal(t, word, batch.words[place-1], "item %s word %d", item, w)
			require.Equal(t, mask, uint32(at[2])<<24|uint32(at[3])<<16|uint32(at[4])<<8|uint32(at[5]))
			w++
		})
	}
	args := batch.appendWords(nil)
	require.Equal(t, len(batch.words), args[0])
	require.Equal(t, "#"+strconv.FormatUint(batch.words[0], 10), args[1])
}
