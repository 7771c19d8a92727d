package btplugin

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// appendJSONMillis writes what time.Time's MarshalJSON writes for the
// same millisecond, fraction digits and refusals included: at the edges
// of days, months, leap years, eras and the years MarshalJSON accepts,
// and at random times across them.
func TestAppendJSONMillis(t *testing.T) {
	year := func(y int) int64 { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() }
	cases := []int64{0, 1, -1, 10, 100, 120, 999, 1000, 1001, 59_999, 86_399_999, 86_400_000, -86_400_000,
		1_764_540_000_000, 1_764_540_000_123, 1_764_540_000_120, 1_764_540_000_100, 1_764_540_000_003,
		time.Date(2000, 2, 29, 23, 59, 59, 999e6, time.UTC).UnixMilli(), time.Date(1900, 2, 28, 12, 0, 0, 0, time.UTC).UnixMilli(),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), time.Date(2400, 12, 31, 23, 59, 59, 0, time.UTC).UnixMilli(),
		year(0), year(0) - 1, year(1), year(1600), year(10000), year(10000) - 1, year(-1), math.MaxInt64, math.MinInt64}
	rng := rand.New(rand.NewPCG(48, 1))
	for range 20_000 {
		cases = append(cases, year(-100)+rng.Int64N(year(10100)-year(-100)))
	}
	for range 2_000 {
		cases = append(cases, rng.Int64())
	}
	for _, ms := range cases {
		want, wantErr := time.UnixMilli(ms).UTC().MarshalJSON()
		got, err := appendJSONMillis([]byte("x"), ms)
		if wantErr != nil {
			require.Error(t, err, "ms %d", ms)
			continue
		}
		require.NoError(t, err, "ms %d", ms)
		require.Equal(t, "x"+string(want), string(got), "ms %d", ms)
	}
}

func FuzzAppendJSONMillis(f *testing.F) {
	for _, ms := range []int64{0, -1, 1_764_540_000_123, math.MaxInt64, math.MinInt64} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, ms int64) {
		want, wantErr := time.UnixMilli(ms).UTC().MarshalJSON()
		got, err := appendJSONMillis(nil, ms)
		if (err != nil) != (wantErr != nil) || (err == nil && string(got) != string(want)) {
			t.Fatalf("ms %d: got %q, %v; MarshalJSON %q, %v", ms, got, err, want, wantErr)
		}
	})
}

func BenchmarkAppendJSONMillis(b *testing.B) {
	buf := make([]byte, 0, 64)
	ms := int64(1_764_540_000_123)
	for b.Loop() {
		buf, _ = appendJSONMillis(buf[:0], ms)
		ms += 7
	}
}
