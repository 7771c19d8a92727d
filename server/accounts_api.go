package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/hoardproject/hoard/accounts"
	"github.com/hoardproject/hoard/queues"
)

// AccountStore is what the accounts API needs (accounts.Store).
type AccountStore interface {
	CreateAccount(ctx context.Context, name string, roles []string) (accounts.Account, error)
	SetRoles(ctx context.Context, name string, roles []string) (accounts.Account, error)
	Account(ctx context.Context, name string) (accounts.Account, error)
	Accounts(ctx context.Context) ([]accounts.Account, error)
	RemoveAccount(ctx context.Context, name string) (int, error)
	CreateToken(ctx context.Context, account, name string, ttl time.Duration) (string, accounts.Token, error)
	Tokens(ctx context.Context, account string) ([]accounts.Token, error)
	Token(ctx context.Context, id string) (accounts.Token, error)
	RevokeToken(ctx context.Context, id string) (accounts.Token, error)
}

// AccountsAPI serves the accounts and their tokens:
//
//	GET    /api/v1/whoami                 the caller's account and roles
//	GET    /api/v1/accounts               every account (admin)
//	POST   /api/v1/accounts               {"name","roles":[…]} add one (admin)
//	GET    /api/v1/accounts/:name         one account (admin)
//	PATCH  /api/v1/accounts/:name         {"roles":[…]} replace its roles (admin)
//	DELETE /api/v1/accounts/:name         remove it and its tokens (admin)
//	GET    /api/v1/tokens[?account=]      the caller's tokens (an admin: anyone's, or all)
//	POST   /api/v1/tokens                 {"name","account","expires_in"} a new token, shown once
//	DELETE /api/v1/tokens/:id             revoke one (the caller's own; an admin: any)
//
// Every change is recorded in the global admin log, with the account that
// made it; a token is never logged, nor answered but once, to its creator.
type AccountsAPI struct {
	Store AccountStore
	Admin *AdminAPI
}

func (a *AccountsAPI) register(g *gin.RouterGroup) {
	g.GET("/whoami", a.whoami)
	g.GET("/accounts", a.list)
	g.POST("/accounts", a.create)
	g.GET("/accounts/:name", a.show)
	g.PATCH("/accounts/:name", a.setRoles)
	g.DELETE("/accounts/:name", a.remove)
	g.GET("/tokens", a.listTokens)
	g.POST("/tokens", a.createToken)
	g.DELETE("/tokens/:id", a.revokeToken)
}

// accountError maps the store's errors to the one error format; their
// messages never carry a token.
func accountError(err error) error {
	var ae *accounts.Error
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case errors.Is(err, accounts.ErrInvalid):
		return badRequest("%s", ae.Message)
	case errors.Is(err, accounts.ErrNotFound):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: ae.Message}
	case errors.Is(err, accounts.ErrExists):
		return &httpError{Status: http.StatusConflict, Code: "exists", Message: ae.Message}
	case errors.Is(err, accounts.ErrUnavailable):
		return &queues.Error{Op: "server.accounts", Code: queues.CodeUnavailable, Message: ae.Message, Err: err}
	}
	return err
}

// WhoAmI answers GET /whoami.
type WhoAmI struct {
	Account string   `json:"account"`
	Roles   []string `json:"roles"`
	TokenID string   `json:"token_id,omitempty"`
}

func (a *AccountsAPI) whoami(c *gin.Context) {
	p := principal(c)
	c.JSON(http.StatusOK, WhoAmI{Account: p.Account, Roles: p.Roles.Strings(), TokenID: p.TokenID})
}

func (a *AccountsAPI) list(c *gin.Context) {
	list, err := a.Store.Accounts(c.Request.Context())
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	c.JSON(http.StatusOK, gin.H{"accounts": list})
}

// AccountRequest is the body of POST /accounts and PATCH /accounts/:name.
type AccountRequest struct {
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles"`
}

func (a *AccountsAPI) create(c *gin.Context) {
	var req AccountRequest
	if !a.Admin.decode(c, &req) {
		return
	}
	acct, err := a.Store.CreateAccount(c.Request.Context(), req.Name, req.Roles)
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	a.Admin.recordChange(c, "", "", "account added", "account", acct.Name, "roles", acct.Roles)
	c.JSON(http.StatusCreated, acct)
}

func (a *AccountsAPI) show(c *gin.Context) {
	acct, err := a.Store.Account(c.Request.Context(), c.Param("name"))
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	c.JSON(http.StatusOK, acct)
}

func (a *AccountsAPI) setRoles(c *gin.Context) {
	var req AccountRequest
	if !a.Admin.decode(c, &req) {
		return
	}
	if req.Name != "" && req.Name != c.Param("name") {
		_ = c.Error(badRequest("an account cannot be renamed (the body names %q, the path %q)", req.Name, c.Param("name")))
		return
	}
	acct, err := a.Store.SetRoles(c.Request.Context(), c.Param("name"), req.Roles)
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	a.Admin.recordChange(c, "", "", "account roles set", "account", acct.Name, "roles", acct.Roles)
	c.JSON(http.StatusOK, acct)
}

func (a *AccountsAPI) remove(c *gin.Context) {
	n, err := a.Store.RemoveAccount(c.Request.Context(), c.Param("name"))
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	a.Admin.recordChange(c, "", "", "account removed", "account", c.Param("name"), "tokens_revoked", n)
	c.JSON(http.StatusOK, gin.H{"removed": c.Param("name"), "tokens_revoked": n})
}

// ownAccount is the account whose tokens a call is about: the caller's,
// or, for an admin, the one it names ("" = every account, to list).
func ownAccount(c *gin.Context, named string, all bool) (string, error) {
	p := principal(c)
	switch {
	case p.Roles.Admin():
		if named == "" && !all {
			named = p.Account
		}
		return named, nil
	case named == "" || named == p.Account:
		return p.Account, nil
	}
	return "", forbidden(c, p, "admin (an account manages only its own tokens)")
}

func (a *AccountsAPI) listTokens(c *gin.Context) {
	account, err := ownAccount(c, c.Query("account"), true)
	if err != nil {
		_ = c.Error(err)
		return
	}
	list, err := a.Store.Tokens(c.Request.Context(), account)
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	c.JSON(http.StatusOK, gin.H{"tokens": list})
}

// TokenRequest is the body of POST /tokens. Account defaults to the
// caller's own; ExpiresIn (a duration such as 720h) to never.
type TokenRequest struct {
	Name      string          `json:"name"`
	Account   string          `json:"account,omitempty"`
	ExpiresIn queues.Duration `json:"expires_in,omitempty"`
}

// NewToken answers POST /tokens: the token, shown this once.
type NewToken struct {
	Secret string `json:"token"`
	accounts.Token
}

func (a *AccountsAPI) createToken(c *gin.Context) {
	var req TokenRequest
	if !a.Admin.decode(c, &req) {
		return
	}
	account, err := ownAccount(c, req.Account, false)
	if err != nil {
		_ = c.Error(err)
		return
	}
	if principal(c).Account == BootstrapActor && req.Account == "" {
		_ = c.Error(badRequest("HOARD_ADMIN_TOKEN is no account: name the account the token is for (\"account\")"))
		return
	}
	if req.ExpiresIn < 0 {
		_ = c.Error(badRequest("expires_in must be a positive duration such as 720h"))
		return
	}
	token, rec, err := a.Store.CreateToken(c.Request.Context(), account, req.Name, time.Duration(req.ExpiresIn))
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	a.Admin.recordChange(c, "", "", "token created", "account", rec.Account, "token_id", rec.ID, "token_name", rec.Name,
		"expires_at", rec.ExpiresAt)
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusCreated, NewToken{Secret: token, Token: rec})
}

func (a *AccountsAPI) revokeToken(c *gin.Context) {
	tok, err := a.Store.Token(c.Request.Context(), c.Param("id"))
	if err != nil {
		_ = c.Error(accountError(err))
		return
	}
	if _, err := ownAccount(c, tok.Account, false); err != nil {
		// Another account's token is answered as missing: its id tells
		// nothing to who may not revoke it.
		_ = c.Error(accountError(&accounts.Error{Kind: accounts.ErrNotFound, Message: "no token " + `"` + c.Param("id") + `"` + " of yours"}))
		return
	}
	if _, err := a.Store.RevokeToken(c.Request.Context(), tok.ID); err != nil {
		_ = c.Error(accountError(err))
		return
	}
	a.Admin.recordChange(c, "", "", "token revoked", "account", tok.Account, "token_id", tok.ID, "token_name", tok.Name)
	c.JSON(http.StatusOK, gin.H{"revoked": tok.ID})
}
