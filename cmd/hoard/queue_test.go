package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readAll(t *testing.T, input string, max int) (lines []string, long int) {
	t.Helper()
	r := bufio.NewReaderSize(strings.NewReader(input), 16)
	for {
		line, tooLong, err := readLine(r, max)
		if tooLong {
			long++
		} else if len(line) > 0 || err == nil {
			lines = append(lines, string(line))
		}
		if errors.Is(err, io.EOF) {
			return lines, long
		}
		require.NoError(t, err)
	}
}

func TestReadLineBoundsMemoryAndKeepsGoing(t *testing.T) {
	input := "a\r\n" + strings.Repeat("x", 100) + "\n\nb\n" + strings.Repeat("y", 40) + "\nlast"
	lines, long := readAll(t, input, 32)
	require.Equal(t, []string{"a\r", "", "b", "last"}, lines)
	require.Equal(t, 2, long, "both over-long lines are reported, and reading resumes after each")
}

func TestParseAddLine(t *testing.T) {
	raw, why := parseAddLine("user:foo", false)
	require.Empty(t, why)
	require.JSONEq(t, `"user:foo"`, string(raw))
	_, why = parseAddLine("bad\x00item", false)
	require.Contains(t, why, "NUL")
	raw, why = parseAddLine(`{"name":"u","extras":{"d":1}}`, true)
	require.Empty(t, why)
	require.JSONEq(t, `{"name":"u","extras":{"d":1}}`, string(raw))
	_, why = parseAddLine(`not json`, true)
	require.NotEmpty(t, why)
}
