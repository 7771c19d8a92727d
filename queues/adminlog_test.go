package queues_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/redistest"
	"github.com/hoardproject/hoard/queues"
)

// TestAdminLogsKeepTheirBound: each admin log (a project's and the
// global one) keeps the newest AdminLogLength entries, so old entries
// beyond it are not left behind.
func TestAdminLogsKeepTheirBound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, queues.SettingsPatch{})
		for _, slug := range []string{tb.slug, ""} {
			for i := range queues.AdminLogLength + 5 {
				require.NoError(t, tb.engine.RecordChange(tb.ctx, slug, queues.ChangeEntry{By: "op", What: fmt.Sprint("change ", i)}))
			}
			key := queues.GlobalAdminLogKey
			if slug != "" {
				key = queues.AdminLogKey(slug)
			}
			require.Equal(t, int64(queues.AdminLogLength), tb.rdb.LLen(tb.ctx, key).Val())
			newest, err := tb.engine.Changes(tb.ctx, slug, 1)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint("change ", queues.AdminLogLength+4), newest[0].What)
			oldest := tb.rdb.LIndex(tb.ctx, key, -1).Val()
			require.Contains(t, oldest, `"change 5"`, "the first five went")
		}
	})
}
