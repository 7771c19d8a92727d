package wire

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/require"
)

func TestBencodeWriter(t *testing.T) {
	var b []byte
	b = AppendDictStart(b)
	b = AppendString(b, "a")
	b = AppendInt(b, -42)
	b = AppendString(b, "b")
	b = AppendListStart(b)
	b = AppendBytes(b, []byte{0, 1, ':'})
	b = AppendInt(b, math.MinInt64)
	b = AppendString(b, "")
	b = AppendEnd(b)
	b = AppendEnd(b)
	require.Equal(t, "d1:ai-42e1:bl3:\x00\x01:i-9223372036854775808e0:ee", string(b))
}

func TestAppendFailure(t *testing.T) {
	b := AppendFailure(nil, "unregistered torrent")
	require.Equal(t, "d14:failure reason20:unregistered torrente", string(b))
	var decoded map[string]any
	require.NoError(t, bencode.Unmarshal(b, &decoded))
	require.Equal(t, "unregistered torrent", decoded["failure reason"])
}

// fuzzSource turns fuzz input into a stream of choices; it yields zeros
// once the input runs out, so every input builds a finite value.
type fuzzSource struct{ b []byte }

func (s *fuzzSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *fuzzSource) bytes(n int) []byte {
	n = min(n, len(s.b))
	out := s.b[:n]
	s.b = s.b[n:]
	return out
}

func (s *fuzzSource) int64() int64 {
	var buf [8]byte
	copy(buf[:], s.bytes(8))
	return int64(binary.BigEndian.Uint64(buf[:]))
}

// genValue builds a value of the shapes the anacrolix decoder returns for
// interface{}: int64, string, []any, map[string]any.
func genValue(s *fuzzSource, depth int) any {
	kind := s.byte() % 4
	if depth > 4 {
		kind %= 2
	}
	switch kind {
	case 0:
		return s.int64()
	case 1:
		return string(s.bytes(int(s.byte() % 40)))
	case 2:
		list := []any{}
		for range s.byte() % 5 {
			list = append(list, genValue(s, depth+1))
		}
		return list
	default:
		dict := map[string]any{}
		for range s.byte() % 5 {
			key := string(s.bytes(int(s.byte() % 10)))
			dict[key] = genValue(s, depth+1)
		}
		return dict
	}
}

func appendValue(dst []byte, v any) []byte {
	switch v := v.(type) {
	case int64:
		return AppendInt(dst, v)
	case string:
		if len(v)%2 == 0 {
			return AppendString(dst, v)
		}
		return AppendBytes(dst, []byte(v))
	case []any:
		dst = AppendListStart(dst)
		for _, e := range v {
			dst = appendValue(dst, e)
		}
		return AppendEnd(dst)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys) // Go string order is raw-byte order, as bencode wants
		dst = AppendDictStart(dst)
		for _, k := range keys {
			dst = AppendString(dst, k)
			dst = appendValue(dst, v[k])
		}
		return AppendEnd(dst)
	}
	panic("unreachable")
}

// FuzzBencodeWriter builds an arbitrary value, writes it with the append
// writer, and checks an independent decoder reads back the same value.
func FuzzBencodeWriter(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 2, 1, 'a', 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 'b', 'c', 2, 2, 1, 3, 'x', 'y', 'z', 0, 1})
	f.Add([]byte{2, 4, 3, 3, 0, 1, 0, 1, 1, 'k', 1, 5, 0xff, 0, ':', 'e', 'd'})
	f.Fuzz(func(t *testing.T, data []byte) {
		want := genValue(&fuzzSource{b: data}, 0)
		encoded := appendValue(nil, want)
		var got any
		require.NoError(t, bencode.Unmarshal(encoded, &got), "%q", encoded)
		require.Equal(t, want, got, "%q", encoded)
	})
}
