package accounts

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A web admin session is a random cookie standing for the token its
// holder signed in with: the session stores the token's hash, never the
// token, and every use authenticates that hash again, so revoking the
// token, removing the account or changing its roles applies to the
// session at once. A session expires after IdleTimeout without use.

// DefaultIdleTimeout is how long a session lasts unused.
const DefaultIdleTimeout = 30 * time.Minute

// Session is a session's record.
type Session struct {
	// TokenHash is the hash of the token signed in with; Bootstrap marks
	// HOARD_ADMIN_TOKEN, which no account holds (the server checks it
	// against its own token's hash).
	TokenHash string `json:"token_hash"`
	Bootstrap bool   `json:"bootstrap,omitempty"`
	// CSRF is the value every change made in the session must carry in
	// a header, which another site's page cannot read.
	CSRF      string    `json:"csrf"`
	CreatedAt time.Time `json:"created_at"`
}

func randomText() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// CreateSession starts a session for the token whose hash is tokenHash,
// lasting idle without use; it returns the cookie's value and the record.
func (s *Store) CreateSession(ctx context.Context, tokenHash string, bootstrap bool, idle time.Duration) (string, Session, error) {
	cookie, err := randomText()
	if err != nil {
		return "", Session{}, err
	}
	csrf, err := randomText()
	if err != nil {
		return "", Session{}, err
	}
	sess := Session{TokenHash: tokenHash, Bootstrap: bootstrap, CSRF: csrf, CreatedAt: s.clock.Now().UTC()}
	raw, _ := json.Marshal(sess)
	if err := s.rdb.Set(ctx, SessionKey(HashToken(cookie)), raw, idle).Err(); err != nil {
		return "", Session{}, unavailable(err)
	}
	return cookie, sess, nil
}

// Session reads the session of cookie and pushes its expiry back by idle;
// ErrNotFound when it has expired or ended.
func (s *Store) Session(ctx context.Context, cookie string, idle time.Duration) (Session, error) {
	if cookie == "" || len(cookie) > 128 {
		return Session{}, ErrNotFound
	}
	raw, err := s.rdb.GetEx(ctx, SessionKey(HashToken(cookie)), idle).Result()
	if errors.Is(err, redis.Nil) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, unavailable(err)
	}
	var sess Session
	if err := json.Unmarshal([]byte(raw), &sess); err != nil {
		return Session{}, ErrNotFound
	}
	return sess, nil
}

// EndSession ends the session of cookie (signing out).
func (s *Store) EndSession(ctx context.Context, cookie string) error {
	if err := s.rdb.Del(ctx, SessionKey(HashToken(cookie))).Err(); err != nil {
		return unavailable(err)
	}
	return nil
}

// AuthenticateHash is Authenticate for a session, by the token's hash.
func (s *Store) AuthenticateHash(ctx context.Context, hash string) (Principal, error) {
	return s.authenticateHash(ctx, hash)
}
