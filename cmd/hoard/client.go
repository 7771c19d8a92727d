package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/hoardproject/hoard/server"
)

// adminClient speaks to a running server's admin API at HOARD_URL with
// HOARD_ADMIN_TOKEN.
type adminClient struct {
	base  string
	token string
	actor string
	http  *http.Client
}

func newAdminClient() *adminClient {
	actor := "cli"
	if u, err := user.Current(); err == nil {
		actor = u.Username
	}
	if host, err := os.Hostname(); err == nil {
		actor += "@" + host
	}
	return &adminClient{
		base:  strings.TrimSuffix(envOr("HOARD_URL", "http://127.0.0.1:8080"), "/"),
		token: os.Getenv("HOARD_ADMIN_TOKEN"),
		actor: actor,
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
	req.Header.Set(server.ActorHeader, a.actor)
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
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
}
