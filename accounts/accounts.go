// Package accounts owns the operators' accounts and their API tokens: the
// Redis keys they live in (keys.go) and the scripts that change them
// (lua/accounts). An account has roles (roles.go); a token belongs to one
// account, is shown once when created and stored only as its SHA-256, and
// may expire. The server authenticates every admin call with Authenticate
// and checks the account's roles against the route.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/luascript"
	luaaccounts "github.com/hoardproject/hoard/lua/accounts"
)

// Errors, told apart with errors.Is.
var (
	ErrInvalid     = errors.New("invalid")
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("exists")
	ErrUnavailable = errors.New("unavailable")
)

// Error is an error with a message fit for the caller: it never carries a
// token.
type Error struct {
	Kind    error
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }

// Unwrap gives the kind (ErrInvalid, …) and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func notFound(format string, args ...any) error {
	return &Error{Kind: ErrNotFound, Message: fmt.Sprintf(format, args...)}
}

func unavailable(err error) error {
	return &Error{Kind: ErrUnavailable, Message: "redis is unavailable", Err: err}
}

// TokenPrefix starts every token, so a token pasted in the wrong place is
// recognisable (and secret scanners can find it).
const TokenPrefix = "hoard_"

// LastUseInterval is how often a token's last use is recorded at most:
// every admin call authenticates, and a write per call is not worth it.
const LastUseInterval = time.Minute

// Account is one operator (a person, or a site's service account).
type Account struct {
	Name      string    `json:"name"`
	Roles     []string  `json:"roles"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Token is a token's record; the token itself is never stored.
type Token struct {
	ID        string     `json:"id"`
	Account   string     `json:"account"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// ExpiresMS is ExpiresAt in ms (0 = never), for authenticate.lua.
	ExpiresMS int64      `json:"expires_ms,omitempty"`
	LastUsed  *time.Time `json:"last_used,omitempty"`
	Expired   bool       `json:"expired,omitempty"`
}

// Principal is who an authenticated call comes from.
type Principal struct {
	Account string
	Roles   Roles
	// TokenID is the token used ("" for the bootstrap admin token).
	TokenID string
}

// Store reads and changes accounts and tokens.
type Store struct {
	rdb   redis.UniversalClient
	clock clock.Clock
}

// New returns a Store on rdb; a nil clk is the wall clock.
func New(rdb redis.UniversalClient, clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.System{}
	}
	return &Store{rdb: rdb, clock: clk}
}

var (
	accountPutScript    = luascript.Load(luaaccounts.Files, "account_put.lua")
	accountRemoveScript = luascript.Load(luaaccounts.Files, "account_remove.lua")
	tokenCreateScript   = luascript.Load(luaaccounts.Files, "token_create.lua")
	tokenRevokeScript   = luascript.Load(luaaccounts.Files, "token_revoke.lua")
	authenticateScript  = luascript.Load(luaaccounts.Files, "authenticate.lua")
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)

// ValidateName checks an account's or a token's name: 1-64 of a-z, 0-9,
// '.', '_', '@' and '-', starting with a letter or digit. Upper case is
// left out so the bootstrap admin, logged as "HOARD_ADMIN_TOKEN", is
// never an account's name.
func ValidateName(what, name string) error {
	if !namePattern.MatchString(name) {
		return invalid("%s name %q must be 1-64 of a-z, 0-9, '.', '_', '@' and '-', starting with a letter or digit", what, name)
	}
	return nil
}

// CreateAccount adds an account with roles.
func (s *Store) CreateAccount(ctx context.Context, name string, roles []string) (Account, error) {
	return s.putAccount(ctx, name, roles, "create")
}

// SetRoles replaces an account's roles.
func (s *Store) SetRoles(ctx context.Context, name string, roles []string) (Account, error) {
	return s.putAccount(ctx, name, roles, "update")
}

func (s *Store) putAccount(ctx context.Context, name string, roles []string, mode string) (Account, error) {
	if err := ValidateName("account", name); err != nil {
		return Account{}, err
	}
	parsed, err := ParseRoles(roles)
	if err != nil {
		return Account{}, err
	}
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	acct := Account{Name: name, Roles: Roles(parsed).Strings(), CreatedAt: now, UpdatedAt: now}
	if mode == "update" {
		old, err := s.Account(ctx, name)
		if err != nil {
			return Account{}, err
		}
		acct.CreatedAt = old.CreatedAt
	}
	raw, _ := json.Marshal(acct)
	reply, err := luascript.Run(ctx, s.rdb, accountPutScript, []string{AccountsKey}, name, raw, mode)
	if err != nil {
		return Account{}, unavailable(err)
	}
	if n, _ := reply.(int64); n != 1 {
		if mode == "create" {
			return Account{}, &Error{Kind: ErrExists, Message: fmt.Sprintf("account %q exists", name)}
		}
		return Account{}, notFound("no account %q", name)
	}
	return acct, nil
}

// Account reads one account.
func (s *Store) Account(ctx context.Context, name string) (Account, error) {
	raw, err := s.rdb.HGet(ctx, AccountsKey, name).Result()
	if errors.Is(err, redis.Nil) {
		return Account{}, notFound("no account %q", name)
	}
	if err != nil {
		return Account{}, unavailable(err)
	}
	var acct Account
	if err := json.Unmarshal([]byte(raw), &acct); err != nil {
		return Account{}, fmt.Errorf("account %q: %w", name, err)
	}
	return acct, nil
}

// Accounts lists every account, by name.
func (s *Store) Accounts(ctx context.Context) ([]Account, error) {
	all, err := s.rdb.HGetAll(ctx, AccountsKey).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]Account, 0, len(all))
	for name, raw := range all {
		var acct Account
		if err := json.Unmarshal([]byte(raw), &acct); err != nil {
			return nil, fmt.Errorf("account %q: %w", name, err)
		}
		out = append(out, acct)
	}
	slices.SortFunc(out, func(a, b Account) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveAccount removes an account and its tokens; it returns how many
// tokens went with it.
func (s *Store) RemoveAccount(ctx context.Context, name string) (int, error) {
	if err := ValidateName("account", name); err != nil {
		return 0, err
	}
	reply, err := luascript.Run(ctx, s.rdb, accountRemoveScript, []string{AccountsKey, TokensKey, TokenIDsKey,
		LastUsedKey, AccountTokensKey(name), TokenNamesKey(name)}, name)
	if err != nil {
		return 0, unavailable(err)
	}
	n, _ := reply.(int64)
	if n < 0 {
		return 0, notFound("no account %q", name)
	}
	return int(n), nil
}

// HashToken is what is stored of a token: its hex SHA-256. A 256-bit
// random token needs no salt or slow hash: nobody can guess its preimage.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// CreateToken makes a new token for account, named name, expiring after
// ttl (0 = never). The token is returned once and never stored.
func (s *Store) CreateToken(ctx context.Context, account, name string, ttl time.Duration) (string, Token, error) {
	if err := ValidateName("account", account); err != nil {
		return "", Token{}, err
	}
	if err := ValidateName("token", name); err != nil {
		return "", Token{}, err
	}
	if ttl < 0 {
		return "", Token{}, invalid("a token's expiry must be in the future")
	}
	for range 3 {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return "", Token{}, err
		}
		id := make([]byte, 8)
		if _, err := rand.Read(id); err != nil {
			return "", Token{}, err
		}
		token := TokenPrefix + base64.RawURLEncoding.EncodeToString(secret)
		now := s.clock.Now().UTC().Truncate(time.Millisecond)
		rec := Token{ID: hex.EncodeToString(id), Account: account, Name: name, CreatedAt: now}
		if ttl > 0 {
			at := now.Add(ttl)
			rec.ExpiresAt, rec.ExpiresMS = &at, at.UnixMilli()
		}
		raw, _ := json.Marshal(rec)
		reply, err := luascript.Run(ctx, s.rdb, tokenCreateScript, []string{AccountsKey, TokensKey, TokenIDsKey,
			AccountTokensKey(account), TokenNamesKey(account)}, account, HashToken(token), rec.ID, name, raw)
		if err != nil {
			return "", Token{}, unavailable(err)
		}
		switch n, _ := reply.(int64); n {
		case 1:
			return token, rec, nil
		case -1:
			return "", Token{}, notFound("no account %q", account)
		case -2:
			return "", Token{}, &Error{Kind: ErrExists, Message: fmt.Sprintf("account %q has a token named %q (revoke it, or choose another name)", account, name)}
		}
	}
	return "", Token{}, errors.New("could not draw an unused token id")
}

// Tokens lists account's tokens by name, with their last use; "" lists
// every account's.
func (s *Store) Tokens(ctx context.Context, account string) ([]Token, error) {
	var hashes []string
	if account == "" {
		all, err := s.rdb.HVals(ctx, TokenIDsKey).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		hashes = all
	} else {
		all, err := s.rdb.HVals(ctx, AccountTokensKey(account)).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		hashes = all
	}
	out := make([]Token, 0, len(hashes))
	if len(hashes) == 0 {
		return out, nil
	}
	recs, err := s.rdb.HMGet(ctx, TokensKey, hashes...).Result()
	if err != nil {
		return nil, unavailable(err)
	}
	now := s.clock.Now()
	for _, v := range recs {
		raw, ok := v.(string)
		if !ok {
			continue // revoked between the two reads
		}
		var tok Token
		if err := json.Unmarshal([]byte(raw), &tok); err != nil {
			return nil, fmt.Errorf("token record: %w", err)
		}
		tok.Expired = tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt)
		out = append(out, tok)
	}
	if len(out) > 0 {
		ids := make([]string, len(out))
		for i, t := range out {
			ids[i] = t.ID
		}
		used, err := s.rdb.HMGet(ctx, LastUsedKey, ids...).Result()
		if err != nil {
			return nil, unavailable(err)
		}
		for i, v := range used {
			if at, ok := parseMS(v); ok {
				out[i].LastUsed = &at
			}
		}
	}
	slices.SortFunc(out, func(a, b Token) int {
		return cmpOr(strings.Compare(a.Account, b.Account), strings.Compare(a.Name, b.Name))
	})
	return out, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func parseMS(v any) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	var ms int64
	if _, err := fmt.Sscan(s, &ms); err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms).UTC(), true
}

// Token reads one token's record by its id.
func (s *Store) Token(ctx context.Context, id string) (Token, error) {
	hash, err := s.rdb.HGet(ctx, TokenIDsKey, id).Result()
	if errors.Is(err, redis.Nil) {
		return Token{}, notFound("no token %q", id)
	}
	if err != nil {
		return Token{}, unavailable(err)
	}
	raw, err := s.rdb.HGet(ctx, TokensKey, hash).Result()
	if errors.Is(err, redis.Nil) {
		return Token{}, notFound("no token %q", id)
	}
	if err != nil {
		return Token{}, unavailable(err)
	}
	var tok Token
	if err := json.Unmarshal([]byte(raw), &tok); err != nil {
		return Token{}, fmt.Errorf("token record: %w", err)
	}
	return tok, nil
}

// RevokeToken revokes token id; it authenticates nobody from then on.
func (s *Store) RevokeToken(ctx context.Context, id string) (Token, error) {
	tok, err := s.Token(ctx, id)
	if err != nil {
		return Token{}, err
	}
	reply, err := luascript.Run(ctx, s.rdb, tokenRevokeScript, []string{TokensKey, TokenIDsKey, LastUsedKey,
		AccountTokensKey(tok.Account), TokenNamesKey(tok.Account)}, id, tok.Name)
	if err != nil {
		return Token{}, unavailable(err)
	}
	if n, _ := reply.(int64); n != 1 {
		return Token{}, notFound("no token %q", id)
	}
	return tok, nil
}

// Authenticate finds the account of token. It answers ErrNotFound for a
// token that is unknown, revoked or expired, or whose account is gone,
// without saying which. The token is looked up by its SHA-256, never
// compared byte by byte: how long a lookup takes depends on the hash of a
// guess, which tells the guesser nothing about the token.
func (s *Store) Authenticate(ctx context.Context, token string) (Principal, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 128 {
		return Principal{}, ErrNotFound
	}
	return s.authenticateHash(ctx, HashToken(token))
}

func (s *Store) authenticateHash(ctx context.Context, hash string) (Principal, error) {
	now := s.clock.Now()
	reply, err := luascript.Run(ctx, s.rdb, authenticateScript, []string{TokensKey, AccountsKey, LastUsedKey},
		hash, now.UnixMilli(), LastUseInterval.Milliseconds())
	if err != nil {
		return Principal{}, unavailable(err)
	}
	list, ok := reply.([]any)
	if !ok || len(list) < 2 {
		return Principal{}, ErrNotFound
	}
	var tok Token
	var acct Account
	tokRaw, _ := list[0].(string)
	acctRaw, _ := list[1].(string)
	if json.Unmarshal([]byte(tokRaw), &tok) != nil || json.Unmarshal([]byte(acctRaw), &acct) != nil {
		return Principal{}, ErrNotFound
	}
	roles, err := ParseRoles(acct.Roles)
	if err != nil {
		return Principal{}, fmt.Errorf("account %q has a bad role: %w", acct.Name, err)
	}
	return Principal{Account: acct.Name, Roles: roles, TokenID: tok.ID}, nil
}
