package ctl_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testrun"
	"github.com/sluicehq/sluice/services/ctl"
	"github.com/sluicehq/sluice/services/deciderserver"
)

// startFileDecider runs a decider on a copy of examples/sluice.yaml (the file store: no
// Postgres needed) with the admin token.
func startFileDecider(t *testing.T) *deciderserver.Server {
	t.Helper()
	example, err := os.ReadFile("../../examples/sluice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, example, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := deciderserver.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.ConfigPath, cfg.ConfigSnapshot = "127.0.0.1:0", "127.0.0.1:0", path, "-"
	cfg.AdminTokens = adminToken
	srv, err := deciderserver.New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	testrun.Background(t, srv.Run)
	return srv
}

// ctlRun runs `sluice ctl args...` exactly as given (flags wherever the caller put them).
func ctlRun(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := ctl.Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestGlobalFlagsBeforeTheCommand: `sluice ctl --server URL --token T get buckets` works like
// the flags after the command; an unknown flag before the command is a usage error.
func TestGlobalFlagsBeforeTheCommand(t *testing.T) {
	srv := startFileDecider(t)
	server := "http://" + srv.HTTPAddr()
	for _, args := range [][]string{
		{"--server", server, "--token", adminToken, "get", "buckets"},
		{"-server=" + server, "-o", "json", "get", "buckets", "--token", adminToken},
		{"get", "--server", server, "buckets", "--token", adminToken},
	} {
		code, out, errOut := ctlRun(args...)
		if code != ctl.ExitOK || !strings.Contains(out, "short-context") {
			t.Errorf("sluice ctl %s = exit %d\n%s%s\nwant the buckets", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, _, errOut := ctlRun("--nope", "get", "buckets"); code != ctl.ExitUsage || !strings.Contains(errOut, "-nope") {
		t.Errorf("sluice ctl --nope get buckets = exit %d %q, want usage naming the flag", code, errOut)
	}
	if code, _, _ := ctlRun("--server", server); code != ctl.ExitUsage {
		t.Errorf("flags without a command = exit %d, want usage", code)
	}
}

// TestYAMLIntegersAndConfigRoundTrip: -o yaml prints integers as integers (int64 fields
// included), and `get config -o yaml > f && apply -f f` stores the same configuration.
func TestYAMLIntegersAndConfigRoundTrip(t *testing.T) {
	srv := startFileDecider(t)
	flags := []string{"--server", "http://" + srv.HTTPAddr(), "--token", adminToken}
	code, out, errOut := ctlRun(append(flags, "get", "buckets", "-o", "yaml")...)
	if code != ctl.ExitOK {
		t.Fatalf("get buckets -o yaml = exit %d %s", code, errOut)
	}
	for _, want := range []string{"max_kv_tokens: 1048576", "max: 131072", "rank: 20", "version: 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("get buckets -o yaml lacks %q:\n%s", want, out)
		}
	}
	if regexp.MustCompile(`e\+0\d|: "\d+"`).MatchString(out) {
		t.Errorf("get buckets -o yaml printed a number as a float or a string:\n%s", out)
	}
	_, out, _ = ctlRun(append(flags, "versions", "-o", "yaml")...)
	if !strings.Contains(out, "current_version: 1") || !strings.Contains(out, "version: 1") {
		t.Errorf("versions -o yaml = %s, want integer versions", out)
	}

	for _, format := range []string{"yaml", "json"} {
		code, doc, errOut := ctlRun(append(flags, "get", "config", "-o", format)...)
		if code != ctl.ExitOK || !strings.Contains(doc, "long-context") || !strings.Contains(doc, "1048576") {
			t.Fatalf("get config -o %s = exit %d\n%s%s", format, code, doc, errOut)
		}
		f := filepath.Join(t.TempDir(), "config."+format)
		if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := ctlRun(append(flags, "diff", "-f", f)...); code != ctl.ExitOK {
			t.Errorf("diff -f (get config -o %s) = exit %d\n%s%s\nwant no differences", format, code, out, errOut)
		}
		if code, out, errOut := ctlRun(append(flags, "apply", "-f", f)...); code != ctl.ExitOK || !strings.Contains(out, "(no changes)") {
			t.Errorf("apply -f (get config -o %s) = exit %d\n%s%s\nwant applied with no changes", format, code, out, errOut)
		}
	}
}

// TestProblemCountWording: one problem is "1 problem", more are "N problems".
func TestProblemCountWording(t *testing.T) {
	srv := startFileDecider(t)
	flags := []string{"--server", "http://" + srv.HTTPAddr(), "--token", adminToken}
	one := writeFile(t, "one.yaml", "buckets: [{id: a, limits: {min: 5, max: 1}, groups: {plain: {}}}]\n")
	two := writeFile(t, "two.yaml", "buckets: [{id: a, limits: {min: 5, max: 1}, groups: {plain: {}}}, {id: a, groups: {plain: {}}}]\n")
	for file, want := range map[string]string{one: "(1 problem):", two: "(2 problems):"} {
		code, _, errOut := ctlRun(append(flags, "validate", "-f", file)...)
		if code != ctl.ExitInvalid || !strings.Contains(errOut, want) {
			t.Errorf("validate -f %s = exit %d %q, want %q", filepath.Base(file), code, errOut, want)
		}
	}
}
