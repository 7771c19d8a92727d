package luascript_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

func TestLoadPrependsPartsAndRunReadsReplies(t *testing.T) {
	files := fstest.MapFS{
		"prelude.lua": {Data: []byte("local function twice(n) return n * 2 end")},
		"list.lua":    {Data: []byte("return {twice(tonumber(ARGV[1])), KEYS[1]}")},
		"nil.lua":     {Data: []byte("return nil")},
		"number.lua":  {Data: []byte("return R.ANSWER")},
	}
	require.Panics(t, func() { luascript.Load(files, "missing.lua") })
	prelude := luascript.Prelude(files, "prelude.lua")
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		list, err := luascript.RunList(ctx, b.Client, luascript.Load(files, "list.lua", prelude), []string{"k{x}"}, 21)
		require.NoError(t, err)
		require.Equal(t, []any{int64(42), "k{x}"}, list)

		reply, err := luascript.Run(ctx, b.Client, luascript.Load(files, "nil.lua"), []string{"k{x}"})
		require.NoError(t, err, "a nil reply is not an error")
		require.Nil(t, reply)
		_, err = luascript.RunList(ctx, b.Client, luascript.Load(files, "nil.lua"), []string{"k{x}"})
		require.ErrorContains(t, err, "want an array")

		n, err := luascript.Run(ctx, b.Client, luascript.Load(files, "number.lua", "local R = {ANSWER = -7}"), []string{"k{x}"})
		require.NoError(t, err)
		require.Equal(t, int64(-7), n, "parts are prepended in order")
	})
}
