package luascript_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/internal/luascript"
	"github.com/hoardproject/hoard/internal/redistest"
)

var (
	reader = luascript.Load(fstest.MapFS{"read.lua": {Data: []byte(
		"-- read.lua: reads KEYS[1]\n-- flags: no-writes\n\nreturn redis.call('GET', KEYS[1])")}}, "read.lua")
	writer = luascript.Load(fstest.MapFS{"write.lua": {Data: []byte(
		"-- write.lua: sets KEYS[1]\nreturn redis.call('SET', KEYS[1], ARGV[1])")}}, "write.lua")
	// wrongFlag declares no-writes but writes: Redis must refuse it.
	wrongFlag = luascript.Load(fstest.MapFS{"wrong.lua": {Data: []byte(
		"-- flags: no-writes\nreturn redis.call('SET', KEYS[1], ARGV[1])")}}, "wrong.lua")
)

func TestHeaderFlags(t *testing.T) {
	require.True(t, reader.ReadOnly())
	require.False(t, writer.ReadOnly())
	require.Contains(t, reader.Library(), "flags={'no-writes'}")
	require.NotContains(t, writer.Library(), "no-writes")
	require.PanicsWithValue(t,
		`lua script: header line "-- flags: no-write": unknown flag "no-write" (only no-writes is known)`,
		func() { luascript.FromSource("-- flags: no-write\nreturn 1") })
	require.False(t, luascript.FromSource("return 1\n-- flags: no-writes").ReadOnly(),
		"the flag counts only in the header, before the first line of code")
}

// Over maxmemory, Redis refuses every function not flagged no-writes: a
// script whose header declares it still answers, a writing script gets
// OOM and changes nothing, and a script that declares no-writes but
// writes is refused whatever the memory.
func TestReadOnlyScriptsAnswerOverMaxmemory(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		_, err := luascript.Run(ctx, b.Client, wrongFlag, []string{"k{ro}"}, "x")
		require.ErrorContains(t, err, "Write commands are not allowed from read-only scripts")
		_, err = luascript.Run(ctx, b.Client, writer, []string{"k{ro}"}, "before")
		require.NoError(t, err)
		// Loaded before the limit: FUNCTION LOAD is itself refused over it.
		require.NoError(t, reader.Load(ctx, b.Client))

		redistest.OverMaxmemory(t, b.Client)
		_, err = luascript.Run(ctx, b.Client, writer, []string{"k{ro}"}, "after")
		require.ErrorContains(t, err, "OOM", "the control: the server is over its maxmemory")
		got, err := luascript.Run(ctx, b.Client, reader, []string{"k{ro}"})
		require.NoError(t, err, "a no-writes script answers over maxmemory")
		require.Equal(t, "before", got, "the refused write changed nothing")
		cmds := luascript.RunPipelined(ctx, b.Client, []luascript.Call{{Script: reader, Keys: []string{"k{ro}"}}})
		require.Equal(t, "before", cmds[0].Val(), "and in a pipeline")
	})
}

// Without functions the EVAL form is plain (no #! line): over maxmemory a
// reading script still answers, as Redis refuses a plain EVAL only at a
// write.
func TestReadOnlyScriptsAnswerOverMaxmemoryWithEval(t *testing.T) {
	ctx := t.Context()
	client := serverWithoutFunctions(t)

	_, err := luascript.Run(ctx, client, writer, []string{"k{ro}"}, "before")
	require.NoError(t, err)
	redistest.OverMaxmemory(t, client)
	_, err = luascript.Run(ctx, client, writer, []string{"k{ro}"}, "after")
	require.ErrorContains(t, err, "OOM")
	got, err := luascript.Run(ctx, client, reader, []string{"k{ro}"})
	require.NoError(t, err)
	require.Equal(t, "before", got)
}
