package queues

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func BenchmarkNewBlockedShape(b *testing.B) {
	for i := 0; i < b.N; i++ {
		blockedShapes.Clear()
		newBlockedShape(DefaultBloomCapacity, DefaultBloomFPRate)
	}
}

// TestBlockedShapesAtTheDefaults pins what the default settings start: the
// memory per item is what docs/warrior-api.md states.
func TestBlockedShapesAtTheDefaults(t *testing.T) {
	for _, c := range []struct {
		fp    float64
		words uint
	}{{1e-6, 3}, {1e-4, 2}, {1e-3, 2}, {0.1, 2}, {1e-9, 4}} {
		shape := newBlockedShape(1_000_000, c.fp)
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
		shape := newBlockedShape(c.capacity, c.fp)
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
