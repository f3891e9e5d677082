package gateway

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/components/limits"
)

// Config is the gateway's configuration, bound to flags with SLUICE_* environment fallbacks in
// main and validated at start-up.
type Config struct {
	// Addr is the HTTP listen address (OpenAI routes, the REST mapping, /metrics).
	Addr string
	// DeciderAddr is the decider's native gRPC address.
	DeciderAddr string
	// DeciderToken, when set, is sent as a bearer token on the gateway's own decider calls
	// (Decide, Release, ListEngines). REST calls proxied to the decider carry the client's
	// Authorization header instead.
	DeciderToken string
	// DecideTimeout bounds each Decide call.
	DecideTimeout time.Duration
	// Tokenizer selects how input tokens are counted: "estimate" (ceil(bytes/4), no token ids),
	// "engine" (POST the prompt to an engine's /tokenize) or "hf:/path/tokenizer.json".
	Tokenizer string
	// TokenizerURL is the engine base URL asked in "engine" mode; empty asks the first healthy
	// engine serving the request's model.
	TokenizerURL string
	// TokenizerTimeout bounds one /tokenize call in "engine" mode.
	TokenizerTimeout time.Duration
	// ForwardTokenIDs, in "engine" mode, sends a /v1/completions string prompt to the engine as
	// the token ids its /tokenize returned, so the engine does not tokenize it a second time
	// (not with echo, suffix or add_special_tokens, nor when /tokenize failed).
	ForwardTokenIDs bool
	// SessionHeader names the header whose value becomes DecideRequest.session_key.
	SessionHeader string
	// RoutingHeader names the header whose value becomes DecideRequest.routing_key.
	RoutingHeader string
	// DefaultModel is used for /generate requests without a "model" field (SGLang clients
	// usually send none); empty makes the field required there too.
	DefaultModel string
	// DefaultMaxTokens is the output budget assumed when a request sets no max_tokens;
	// 0 leaves the expected peak unknown.
	DefaultMaxTokens int64
	// UpstreamTimeout bounds one whole exchange with an engine, streaming included; 0 = none.
	UpstreamTimeout time.Duration
	// RetryOnEngineFailure retries a request once on a new decision when its engine failed
	// before any byte reached the client.
	RetryOnEngineFailure bool
	// RetryAfter is the Retry-After sent with 503 answers.
	RetryAfter time.Duration
	// ReleaseTimeout bounds the Release call made when a response ends.
	ReleaseTimeout time.Duration
	// ShutdownTimeout bounds the graceful drain.
	ShutdownTimeout time.Duration
	// MaxTokenIDs must match the decider's -max-token-ids: the request body limit (413 beyond)
	// and the gRPC message limits towards the decider derive from it (components/limits), and a
	// prompt with more token ids is refused here with 413 instead of by the decider.
	MaxTokenIDs int
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout bound a client that sends its headers or
	// body slowly, or holds an idle keep-alive connection (http.Server's fields of these names).
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	// ReadyTimeout bounds the decider health check behind /readyz; ReadyCache is how long its
	// answer is reused.
	ReadyTimeout, ReadyCache time.Duration
	// DecisionHeaders adds the X-Sluice-Engine, -Bucket, -Reason, -Matched-Tokens and
	// -Config-Version response headers (decision_headers.go); each Decide then asks for an
	// explanation. Off by default; on in `sluice dev`.
	DecisionHeaders bool
}

// DefaultConfig returns the defaults every flag starts from.
func DefaultConfig() Config {
	return Config{
		Addr:                 ":8080",
		DeciderAddr:          "localhost:7070",
		DecideTimeout:        2 * time.Second,
		Tokenizer:            TokenizerEstimate,
		TokenizerTimeout:     2 * time.Second,
		ForwardTokenIDs:      true,
		SessionHeader:        "x-session-id",
		RoutingHeader:        "x-routing-key",
		UpstreamTimeout:      10 * time.Minute,
		RetryOnEngineFailure: true,
		RetryAfter:           time.Second,
		ReleaseTimeout:       2 * time.Second,
		ShutdownTimeout:      10 * time.Second,
		MaxTokenIDs:          limits.DefaultMaxTokenIDs,
		ReadHeaderTimeout:    10 * time.Second,
		ReadTimeout:          time.Minute,
		IdleTimeout:          2 * time.Minute,
		ReadyTimeout:         time.Second,
		ReadyCache:           time.Second,
	}
}

// RegisterFlags binds c's fields to fs; values already in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "HTTP listen address: OpenAI routes, decider REST mapping, /metrics")
	fs.StringVar(&c.DeciderAddr, "decider-addr", c.DeciderAddr, "decider native gRPC address (host:port)")
	fs.StringVar(&c.DeciderToken, "decider-token", c.DeciderToken, "bearer token for the gateway's own decider calls; empty = none")
	fs.DurationVar(&c.DecideTimeout, "decide-timeout", c.DecideTimeout, "bound on each Decide call")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "token counting: estimate (bytes/4), engine (an engine's /tokenize) or hf:/path/tokenizer.json")
	fs.StringVar(&c.TokenizerURL, "tokenizer-url", c.TokenizerURL, "engine base URL for -tokenizer engine; empty = first healthy engine of the model")
	fs.DurationVar(&c.TokenizerTimeout, "tokenizer-timeout", c.TokenizerTimeout, "bound on one /tokenize call")
	fs.BoolVar(&c.ForwardTokenIDs, "forward-token-ids", c.ForwardTokenIDs, "with -tokenizer engine, send a /v1/completions text prompt to the engine as the token ids /tokenize gave, so it is not tokenized twice (not with echo, suffix or add_special_tokens)")
	fs.StringVar(&c.SessionHeader, "session-header", c.SessionHeader, "request header carrying the session key")
	fs.StringVar(&c.RoutingHeader, "routing-header", c.RoutingHeader, "request header carrying the routing key")
	fs.StringVar(&c.DefaultModel, "default-model", c.DefaultModel, "model for /generate requests that name none (SGLang clients usually do not); empty = required")
	fs.Int64Var(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output budget assumed when a request sets none; 0 = unknown peak")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", c.UpstreamTimeout, "bound on a whole engine exchange, streaming included; 0 = none")
	fs.BoolVar(&c.RetryOnEngineFailure, "retry-on-engine-failure", c.RetryOnEngineFailure, "retry once on another engine when one fails before the first byte")
	fs.DurationVar(&c.RetryAfter, "retry-after", c.RetryAfter, "Retry-After sent with 503 answers (rounded up to seconds)")
	fs.DurationVar(&c.ReleaseTimeout, "release-timeout", c.ReleaseTimeout, "bound on the Release call when a response ends")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "graceful shutdown deadline")
	fs.IntVar(&c.MaxTokenIDs, "max-token-ids", c.MaxTokenIDs, "the decider's -max-token-ids; the request body limit and the decider gRPC message limits derive from it")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", c.ReadHeaderTimeout, "bound on reading a request's headers")
	fs.DurationVar(&c.ReadTimeout, "read-timeout", c.ReadTimeout, "bound on reading a whole request, body included (not the response: streams may run long)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "how long an idle keep-alive connection is kept")
	fs.DurationVar(&c.ReadyTimeout, "ready-timeout", c.ReadyTimeout, "bound on the decider health check behind /readyz")
	fs.DurationVar(&c.ReadyCache, "ready-cache", c.ReadyCache, "how long a /readyz answer about the decider is reused")
	fs.BoolVar(&c.DecisionHeaders, "decision-headers", c.DecisionHeaders, "add X-Sluice-Engine/-Bucket/-Reason/-Matched-Tokens/-Config-Version response headers (each Decide asks for an explanation)")
}

// Validate checks every field and reports all problems, each naming the flag and the fix.
func (c *Config) Validate() error {
	var errs []error
	for _, a := range []struct{ flag, v string }{{"addr", c.Addr}, {"decider-addr", c.DeciderAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("-%s %q: want host:port (e.g. :8080): %w", a.flag, a.v, err))
		}
	}
	if _, err := parseTokenizerMode(c.Tokenizer); err != nil {
		errs = append(errs, err)
	}
	if c.TokenizerURL != "" && !strings.HasPrefix(c.TokenizerURL, "http://") && !strings.HasPrefix(c.TokenizerURL, "https://") {
		errs = append(errs, fmt.Errorf("-tokenizer-url %q: want an http:// or https:// base URL", c.TokenizerURL))
	}
	for _, h := range []struct{ flag, v string }{{"session-header", c.SessionHeader}, {"routing-header", c.RoutingHeader}} {
		if h.v == "" || strings.ContainsAny(h.v, " \t:") {
			errs = append(errs, fmt.Errorf("-%s %q: want a header name such as x-session-id", h.flag, h.v))
		}
	}
	if c.DefaultMaxTokens < 0 {
		errs = append(errs, fmt.Errorf("-default-max-tokens %d: must be 0 (unknown) or positive", c.DefaultMaxTokens))
	}
	positive := []struct {
		flag string
		v    time.Duration
	}{{"decide-timeout", c.DecideTimeout}, {"tokenizer-timeout", c.TokenizerTimeout}, {"retry-after", c.RetryAfter},
		{"release-timeout", c.ReleaseTimeout}, {"shutdown-timeout", c.ShutdownTimeout}, {"read-header-timeout", c.ReadHeaderTimeout},
		{"read-timeout", c.ReadTimeout}, {"idle-timeout", c.IdleTimeout}, {"ready-timeout", c.ReadyTimeout}}
	for _, p := range positive {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("-%s %v: must be positive", p.flag, p.v))
		}
	}
	if c.ReadyCache < 0 {
		errs = append(errs, fmt.Errorf("-ready-cache %v: must be 0 (ask every time) or positive", c.ReadyCache))
	}
	if err := limits.Validate(c.MaxTokenIDs); err != nil {
		errs = append(errs, err)
	}
	if c.UpstreamTimeout < 0 {
		errs = append(errs, fmt.Errorf("-upstream-timeout %v: must be 0 (none) or positive", c.UpstreamTimeout))
	}
	return errors.Join(errs...)
}

// canonicalHeader returns the canonical form of a configured header name.
func canonicalHeader(name string) string { return http.CanonicalHeaderKey(name) }
