package swarm

// Names that go into key names (user ids, torrent ids, passkeys) are
// 1..64 characters of [A-Za-z0-9_-]: never a brace, which would change a
// key's hash tag, and never a colon, which separates key parts.
const maxNameLen = 64

func validName(name string) bool {
	if name == "" || len(name) > maxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidName says a name (a user id, a passkey, a torrent id) could have
// been written by this package: callers that read names back from keys
// or indexes drop any other.
func ValidName(name string) bool { return validName(name) }
