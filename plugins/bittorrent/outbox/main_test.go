package outbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/internal/redisurl"
	"github.com/hoardproject/hoard/plugins/bittorrent/outbox"
)

// TestMain runs every outbox test on a real redis-server and on a real
// 3-node Redis Cluster (see internal/redistest). Started with
// OUTBOX_CHILD_REDIS set, the test binary is instead a deliverer process
// for TestKilledDelivererLosesNothing to SIGKILL.
func TestMain(m *testing.M) {
	if url := os.Getenv("OUTBOX_CHILD_REDIS"); url != "" {
		os.Exit(runChildDeliverer(url))
	}
	redistest.RunMain(m)
}

// runChildDeliverer delivers to OUTBOX_CHILD_WEBHOOK until killed.
func runChildDeliverer(redisURL string) int {
	rdb, err := redisurl.Dial(redisURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, policy, err := outbox.ParseSettings([]byte(fmt.Sprintf(
		`{"webhook_url":%q,"webhook_secret_env":"OUTBOX_CHILD_SECRET","timeout":"1m","poll":"20ms","allow_private_targets":true}`, os.Getenv("OUTBOX_CHILD_WEBHOOK"))))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ob := outbox.New(rdb, outbox.Config{Policy: policy, Name: "child", Logger: quiet})
	if err := ob.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	time.Sleep(time.Hour) // until SIGKILL
	return 0
}
