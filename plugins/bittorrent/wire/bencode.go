package wire

import "strconv"

// The bencode writer is a set of append functions, in the style of
// strconv.AppendInt: callers own the buffer and reuse it. Dictionaries must
// be written with their keys in sorted raw-byte order and without
// duplicates; the writer does not check, because every dictionary the
// tracker writes has fixed keys known to be sorted.

// AppendInt appends the bencoded integer i<n>e.
func AppendInt(dst []byte, n int64) []byte {
	dst = append(dst, 'i')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, 'e')
}

// AppendString appends the bencoded byte string <len>:<s>.
func AppendString(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// AppendBytes is AppendString for a byte slice.
func AppendBytes(dst, b []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, ':')
	return append(dst, b...)
}

// AppendStringHeader appends only the <len>: prefix of a byte string, for
// callers that write the n bytes of content themselves.
func AppendStringHeader(dst []byte, n int) []byte {
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, ':')
}

// AppendDictStart opens a dictionary; close it with AppendEnd.
func AppendDictStart(dst []byte) []byte { return append(dst, 'd') }

// AppendListStart opens a list; close it with AppendEnd.
func AppendListStart(dst []byte) []byte { return append(dst, 'l') }

// AppendEnd closes the innermost dictionary or list.
func AppendEnd(dst []byte) []byte { return append(dst, 'e') }

// AppendFailure appends a complete tracker error response,
// d14:failure reason<len>:<reason>e, which every client shows its user.
func AppendFailure(dst []byte, reason string) []byte {
	dst = append(dst, "d14:failure reason"...)
	dst = AppendString(dst, reason)
	return append(dst, 'e')
}
