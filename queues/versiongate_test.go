package queues

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzVersionServed: any client version (it comes from the network) is
// decided without a panic; a version equal to the minimum is served, and
// an empty one never is.
func FuzzVersionServed(f *testing.F) {
	for _, seed := range [][2]string{{"20240101.10", "20240101.9"}, {"1.0.beta", "1.0.1"}, {"v3-rc1", "V3-RC1"}, {"", "1"}, {"...", "0"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, version, minimum string) {
		served, sure := versionServed(version, minimum)
		if version == "" {
			require.True(t, sure)
			require.False(t, served)
		}
		if version == minimum && version != "" {
			require.True(t, sure, "%q", version)
			require.True(t, served, "%q", version)
		}
	})
}
