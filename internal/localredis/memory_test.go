package localredis_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/localredis"
)

func TestParseMaxMemory(t *testing.T) {
	const total = 8 << 30
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "512mb": 512 << 20, "4GB": 4 << 30, "64kb": 64 << 10, "1tb": 1 << 40, "100b": 100,
		"50%": 4 << 30, "25%": 2 << 30, "100%": total, " 2gb ": 2 << 30,
	} {
		got, err := localredis.ParseMaxMemory(in, total)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "4g", "lots", "0%", "101%", "1.5gb", "9999999999tb", "%"} {
		_, err := localredis.ParseMaxMemory(in, total)
		require.Error(t, err, in)
	}
	_, err := localredis.ParseMaxMemory("50%", 0)
	require.ErrorContains(t, err, "memory is unknown")
	require.Positive(t, localredis.MachineMemory(), "read from /proc/meminfo")
}
