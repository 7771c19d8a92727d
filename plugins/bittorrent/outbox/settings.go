package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hoardproject/hoard/internal/netguard"
)

// Settings are the outbox's part of the BitTorrent plugin's settings
// ("outbox": {...}). Durations are Go durations ("10s"). Zero values take
// the defaults named on each field; negative numbers are refused.
type Settings struct {
	// WebhookURL receives the events (http or https). Empty: nothing is
	// pushed and the site polls (GET /api/v1/bittorrent/outbox/events).
	WebhookURL string `json:"webhook_url"`
	// The HMAC-SHA256 key the requests are signed with, at least 16
	// bytes, given in exactly one of three ways: as it is, in a file
	// (its trailing newline dropped), or in an environment variable
	// named here. Required with a webhook_url. Never logged.
	WebhookSecret     string `json:"webhook_secret"`
	WebhookSecretFile string `json:"webhook_secret_file"`
	WebhookSecretEnv  string `json:"webhook_secret_env"`
	// MaxAttempts: an event whose requests failed this many times goes to
	// the dead set (20).
	MaxAttempts int `json:"max_attempts"`
	// Backoff is the wait after the first failure ("1s"); it doubles per
	// failure up to MaxBackoff ("1h"), and each wait is drawn between
	// half and all of it (jitter), so frontends that failed together do
	// not retry together.
	Backoff    string `json:"backoff"`
	MaxBackoff string `json:"max_backoff"`
	// Timeout bounds one webhook request, connection to last byte
	// ("10s"): a receiver that hangs is a failed attempt.
	Timeout string `json:"timeout"`
	// BatchSize is the most events in one request (100).
	BatchSize int `json:"batch_size"`
	// Poll is how often an idle deliverer looks for due events ("1s").
	Poll string `json:"poll"`
	// KeepDelivered delivered events stay readable (the newest); older
	// ones are deleted (1000).
	KeepDelivered int `json:"keep_delivered"`
	// DedupWindow: an event whose idempotency key was appended within it
	// is stored once ("168h"); the record keeps at most DedupMax keys
	// (100000).
	DedupWindow string `json:"dedup_window"`
	DedupMax    int    `json:"dedup_max"`
	// MaxPending refuses an append that would leave more undelivered
	// events than this (1000000): the caller retries later, nothing is
	// dropped.
	MaxPending int `json:"max_pending"`
	// The webhook may not be on a loopback, link-local, private (RFC
	// 1918, fc00::/7), CGNAT, unspecified or multicast address, checked
	// when the URL is set (a literal address) and on every connection
	// (what the name resolves to then), unless allowed here: all of them
	// (allow_private_targets, for a site on the same host or LAN), or
	// the listed CIDRs or addresses (allowed_targets: ["10.1.2.3"]).
	AllowPrivateTargets bool     `json:"allow_private_targets"`
	AllowedTargets      []string `json:"allowed_targets"`
}

// Policy is the parsed settings.
type Policy struct {
	// WebhookURL is nil when the site polls.
	WebhookURL    *url.URL
	Secret        Secret
	MaxAttempts   int
	Backoff       time.Duration
	MaxBackoff    time.Duration
	Timeout       time.Duration
	BatchSize     int
	Poll          time.Duration
	KeepDelivered int
	DedupWindow   time.Duration
	DedupMax      int
	MaxPending    int
	// Targets is where the webhook may connect.
	Targets netguard.Policy
}

// Lease is how long a deliverer holds the events of a request: the
// request's timeout plus a margin, so a slow request that still succeeds
// is never taken by a second deliverer, and one whose deliverer died is
// tried again soon after.
func (p Policy) Lease() time.Duration { return 2*p.Timeout + 5*time.Second }

// Secret is the webhook key. It prints as "[redacted]" in logs and
// formatted output, so it is never logged by accident.
type Secret []byte

// String hides the secret.
func (Secret) String() string { return "[redacted]" }

// LogValue hides the secret from slog.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MinSecretBytes is the shortest webhook secret accepted.
const MinSecretBytes = 16

// DefaultPolicy is the policy of empty settings: no webhook (polling),
// default bounds. The admin API's outbox uses it.
func DefaultPolicy() Policy {
	p, err := Settings{}.policy()
	if err != nil {
		panic(err) // the defaults are constants
	}
	return p
}

// ParseSettings reads the outbox's settings and names the bad field in
// its error.
func ParseSettings(raw json.RawMessage) (Settings, Policy, error) {
	var s Settings
	if len(raw) > 0 && string(raw) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, Policy{}, fmt.Errorf("outbox settings: %w", err)
		}
	}
	p, err := s.policy()
	return s, p, err
}

func (s Settings) policy() (Policy, error) {
	p := Policy{MaxAttempts: s.MaxAttempts, BatchSize: s.BatchSize, KeepDelivered: s.KeepDelivered,
		DedupMax: s.DedupMax, MaxPending: s.MaxPending}
	var errs []error
	duration := func(name, text string, def time.Duration) time.Duration {
		if text == "" {
			return def
		}
		d, err := time.ParseDuration(text)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("outbox settings: %s %q is not a positive duration like 10s", name, text))
			return def
		}
		return d
	}
	p.Backoff = duration("backoff", s.Backoff, time.Second)
	p.MaxBackoff = duration("max_backoff", s.MaxBackoff, time.Hour)
	p.Timeout = duration("timeout", s.Timeout, 10*time.Second)
	p.Poll = duration("poll", s.Poll, time.Second)
	p.DedupWindow = duration("dedup_window", s.DedupWindow, 7*24*time.Hour)
	if p.MaxBackoff < p.Backoff {
		errs = append(errs, fmt.Errorf("outbox settings: max_backoff %s is shorter than backoff %s", p.MaxBackoff, p.Backoff))
	}
	for _, f := range []struct {
		name  string
		value *int
		def   int
	}{
		{"max_attempts", &p.MaxAttempts, 20}, {"batch_size", &p.BatchSize, 100},
		{"keep_delivered", &p.KeepDelivered, 1000}, {"dedup_max", &p.DedupMax, 100000},
		{"max_pending", &p.MaxPending, 1000000},
	} {
		switch {
		case *f.value < 0:
			errs = append(errs, fmt.Errorf("outbox settings: %s must not be negative (0 takes the default, %d)", f.name, f.def))
		case *f.value == 0:
			*f.value = f.def
		}
	}
	if p.BatchSize > 10000 {
		errs = append(errs, errors.New("outbox settings: batch_size must be at most 10000"))
	}
	given := 0
	for _, v := range []string{s.WebhookSecret, s.WebhookSecretFile, s.WebhookSecretEnv} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		errs = append(errs, errors.New("outbox settings: give the secret one way: webhook_secret, webhook_secret_file or webhook_secret_env"))
	}
	if s.WebhookURL == "" {
		if given > 0 {
			errs = append(errs, errors.New("outbox settings: a webhook secret without a webhook_url"))
		}
		return p, errors.Join(errs...)
	}
	allow, err := netguard.ParseAllow(s.AllowedTargets)
	if err != nil {
		errs = append(errs, fmt.Errorf("outbox settings: %w", err))
	}
	p.Targets = netguard.Policy{AllowPrivate: s.AllowPrivateTargets, Allow: allow}
	u, err := ParseWebhookURL(s.WebhookURL)
	if err != nil {
		errs = append(errs, err)
	} else if err := p.Targets.CheckHost(u.Hostname()); err != nil {
		errs = append(errs, fmt.Errorf("outbox settings: webhook_url %q: %w", u.Redacted(), err))
	}
	p.WebhookURL = u
	secret, err := s.secret()
	if err != nil {
		errs = append(errs, err)
	}
	p.Secret = secret
	return p, errors.Join(errs...)
}

// ParseWebhookURL accepts an absolute http or https URL with a host. The
// error shows the URL without any password in it.
func ParseWebhookURL(text string) (*url.URL, error) {
	u, err := url.Parse(text)
	if err != nil {
		return nil, errors.New("outbox settings: webhook_url is not a URL")
	}
	shown := u.Redacted()
	switch u.Scheme {
	case "http", "https":
	default:
		return nil, fmt.Errorf("outbox settings: webhook_url %q must be an http:// or https:// URL", shown)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("outbox settings: webhook_url %q has no host", shown)
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("outbox settings: webhook_url %q has a #fragment, which is never sent", shown)
	}
	return u, nil
}

func (s Settings) secret() (Secret, error) {
	var value string
	switch {
	case s.WebhookSecret != "":
		value = s.WebhookSecret
	case s.WebhookSecretFile != "":
		data, err := os.ReadFile(s.WebhookSecretFile)
		if err != nil {
			return nil, fmt.Errorf("outbox settings: webhook_secret_file: %w", err)
		}
		value = strings.TrimRight(string(data), "\r\n")
	case s.WebhookSecretEnv != "":
		value = os.Getenv(s.WebhookSecretEnv)
		if value == "" {
			return nil, fmt.Errorf("outbox settings: webhook_secret_env: the environment variable %s is empty or unset", s.WebhookSecretEnv)
		}
	default:
		return nil, errors.New("outbox settings: a webhook_url needs a secret to sign with (webhook_secret, webhook_secret_file or webhook_secret_env)")
	}
	if len(value) < MinSecretBytes {
		return nil, fmt.Errorf("outbox settings: the webhook secret must be at least %d bytes", MinSecretBytes)
	}
	return Secret(value), nil
}
