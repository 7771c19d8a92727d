package queues

import (
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
