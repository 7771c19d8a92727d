package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// adminClient speaks to a running server's admin API at HOARD_URL with
// an account's token (HOARD_TOKEN) or the bootstrap admin token
// (HOARD_ADMIN_TOKEN). The server logs the change under the token's
// account, so the client names nobody itself.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

func newAdminClient() *adminClient {
	return &adminClient{
		base:  strings.TrimSuffix(envOr("HOARD_URL", "http://127.0.0.1:8080"), "/"),
		token: envOr("HOARD_TOKEN", os.Getenv("HOARD_ADMIN_TOKEN")),
		http:  &http.Client{Timeout: 5 * time.Minute},
	}
}

// do sends body as JSON and decodes the JSON reply into out; a non-2xx
// reply becomes an error carrying the server's message.
func (a *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+"/api/v1"+path, reader)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach hoard at %s (set HOARD_URL): %w", a.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return a.replyError(resp)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// replyError turns a non-2xx reply into an error carrying the server's
// message.
func (a *adminClient) replyError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		switch {
		case resp.StatusCode == http.StatusForbidden && e.Code == "forbidden":
			return fmt.Errorf("refused: your role does not allow this: %s (HTTP 403)", e.Error)
		case resp.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("%s (HTTP 401; set HOARD_TOKEN to an account's token, or HOARD_ADMIN_TOKEN)", e.Error)
		}
		return fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
}
