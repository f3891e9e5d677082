package gateway

import (
	"log/slog"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	if err := func() error { c := DefaultConfig(); return c.Validate() }(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"addr", func(c *Config) { c.Addr = "8080" }, "-addr"},
		{"decider addr", func(c *Config) { c.DeciderAddr = "" }, "-decider-addr"},
		{"tokenizer", func(c *Config) { c.Tokenizer = "tiktoken" }, "-tokenizer \"tiktoken\": use estimate, engine or hf:"},
		{"tokenizer url", func(c *Config) { c.TokenizerURL = "engine:8000" }, "-tokenizer-url"},
		{"header", func(c *Config) { c.SessionHeader = "" }, "-session-header"},
		{"default max tokens", func(c *Config) { c.DefaultMaxTokens = -1 }, "-default-max-tokens"},
		{"retry after", func(c *Config) { c.RetryAfter = 0 }, "-retry-after"},
		{"upstream timeout", func(c *Config) { c.UpstreamTimeout = -1 }, "-upstream-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
	c := DefaultConfig()
	c.Tokenizer = "hf:testdata/nope.json"
	c.Addr = "127.0.0.1:0"
	if _, err := New(slog.New(slog.DiscardHandler), c); err == nil || !strings.Contains(err.Error(), "-tokenizer hf:testdata/nope.json") {
		t.Errorf("New(missing tokenizer.json) = %v, want an error naming the flag", err)
	}
}
