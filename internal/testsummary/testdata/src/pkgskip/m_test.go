package pkgskip

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	fmt.Println("SKIP: redis-server is not installed, so the Redis-backed tests cannot run")
	os.Exit(0)
}
func TestNeedsRedis(t *testing.T) {}
