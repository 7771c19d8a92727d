package accounts_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/internal/clock"
	"github.com/hoardproject/hoard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.RunMain(m) }

func newStore(t *testing.T, b redistest.Backend) (*accounts.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC))
	return accounts.New(b.Client, clk), clk
}

func TestAccountsAndRoles(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)

		acct, err := s.CreateAccount(ctx, "alice", []string{"project-admin:shop", "viewer:*", "plugin:bittorrent:site"})
		require.NoError(t, err)
		require.Equal(t, []string{"project-admin:shop", "viewer:*", "plugin:bittorrent:site"}, acct.Roles)

		_, err = s.CreateAccount(ctx, "alice", []string{"admin"})
		require.ErrorIs(t, err, accounts.ErrExists)

		for _, bad := range [][]string{{"root"}, {"project-admin:"}, {"project-admin:a{b}"}, {"viewer:x", "viewer:x"},
			{"plugin:bittorrent"}, {"plugin:Bad:site"}, {"admin:x"}, {"project-admin:*"}} {
			_, err := s.SetRoles(ctx, "alice", bad)
			require.ErrorIs(t, err, accounts.ErrInvalid, "%v", bad)
		}
		for _, bad := range []string{"", "Alice", "HOARD_ADMIN_TOKEN", "a b", "{x}"} {
			_, err := s.CreateAccount(ctx, bad, []string{"admin"})
			require.ErrorIs(t, err, accounts.ErrInvalid, "%q", bad)
		}
		got, err := s.Account(ctx, "alice")
		require.NoError(t, err)
		require.Equal(t, acct.Roles, got.Roles, "a refused change changes nothing")

		_, err = s.SetRoles(ctx, "bob", []string{"admin"})
		require.ErrorIs(t, err, accounts.ErrNotFound)

		_, err = s.SetRoles(ctx, "alice", []string{"viewer:shop"})
		require.NoError(t, err)
		list, err := s.Accounts(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, []string{"viewer:shop"}, list[0].Roles)

		roles, err := accounts.ParseRoles([]string{"project-admin:shop", "viewer:news"})
		require.NoError(t, err)
		rs := accounts.Roles(roles)
		require.True(t, rs.CanWrite("shop"))
		require.False(t, rs.CanWrite("news"))
		require.True(t, rs.CanRead("news"))
		require.False(t, rs.CanRead("other"))
		require.False(t, rs.ReadsAll())
		require.False(t, rs.Admin())
	})
}

func TestTokens(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		_, err := s.CreateAccount(ctx, "alice", []string{"project-admin:shop"})
		require.NoError(t, err)

		_, _, err = s.CreateToken(ctx, "nobody", "laptop", 0)
		require.ErrorIs(t, err, accounts.ErrNotFound)

		token, rec, err := s.CreateToken(ctx, "alice", "laptop", 0)
		require.NoError(t, err)
		require.Regexp(t, `^hoard_[A-Za-z0-9_-]{43}$`, token)
		_, _, err = s.CreateToken(ctx, "alice", "laptop", 0)
		require.ErrorIs(t, err, accounts.ErrExists, "a token name is unique per account")

		// Only the hash is stored.
		keys, err := b.Client.HKeys(ctx, accounts.TokensKey).Result()
		require.NoError(t, err)
		require.Equal(t, []string{accounts.HashToken(token)}, keys)
		vals, err := b.Client.HVals(ctx, accounts.TokensKey).Result()
		require.NoError(t, err)
		require.NotContains(t, vals[0], token[len(accounts.TokenPrefix):])

		p, err := s.Authenticate(ctx, token)
		require.NoError(t, err)
		require.Equal(t, "alice", p.Account)
		require.Equal(t, rec.ID, p.TokenID)
		require.True(t, p.Roles.CanWrite("shop"))

		// The last character changed to another (a fixed "A" would be the
		// token itself once in 64 runs).
		other := "A"
		if strings.HasSuffix(token, other) {
			other = "B"
		}
		for _, wrong := range []string{"", "hoard_", token + "x", token[:len(token)-1] + other, "Bearer " + token} {
			_, err := s.Authenticate(ctx, wrong)
			require.ErrorIs(t, err, accounts.ErrNotFound)
		}

		// The last use is recorded at most once a minute.
		first := clk.Now().UTC()
		list, err := s.Tokens(ctx, "alice")
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, first, *list[0].LastUsed)
		clk.Advance(30 * time.Second)
		_, err = s.Authenticate(ctx, token)
		require.NoError(t, err)
		list, _ = s.Tokens(ctx, "alice")
		require.Equal(t, first, *list[0].LastUsed, "a use within the minute is not recorded")
		clk.Advance(31 * time.Second)
		_, err = s.Authenticate(ctx, token)
		require.NoError(t, err)
		list, _ = s.Tokens(ctx, "alice")
		require.Equal(t, clk.Now().UTC(), *list[0].LastUsed)

		// Expiry.
		short, _, err := s.CreateToken(ctx, "alice", "ci", time.Hour)
		require.NoError(t, err)
		_, err = s.Authenticate(ctx, short)
		require.NoError(t, err)
		clk.Advance(time.Hour)
		_, err = s.Authenticate(ctx, short)
		require.ErrorIs(t, err, accounts.ErrNotFound, "an expired token authenticates nobody")
		list, _ = s.Tokens(ctx, "alice")
		require.Len(t, list, 2)
		require.Equal(t, "ci", list[0].Name)
		require.True(t, list[0].Expired)

		// Revoke.
		_, err = s.RevokeToken(ctx, rec.ID)
		require.NoError(t, err)
		_, err = s.Authenticate(ctx, token)
		require.ErrorIs(t, err, accounts.ErrNotFound)
		_, err = s.RevokeToken(ctx, rec.ID)
		require.ErrorIs(t, err, accounts.ErrNotFound)
		_, _, err = s.CreateToken(ctx, "alice", "laptop", 0)
		require.NoError(t, err, "a revoked token's name is free again")

		// Removing the account removes its tokens.
		n, err := s.RemoveAccount(ctx, "alice")
		require.NoError(t, err)
		require.Equal(t, 2, n)
		all, err := s.Tokens(ctx, "")
		require.NoError(t, err)
		require.Empty(t, all)
		_, err = s.Authenticate(ctx, short)
		require.True(t, errors.Is(err, accounts.ErrNotFound))
		_, err = s.RemoveAccount(ctx, "alice")
		require.ErrorIs(t, err, accounts.ErrNotFound)
	})
}
