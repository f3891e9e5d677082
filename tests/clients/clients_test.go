package clients

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/clients/go/deciderclient"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/metrictest"
	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/state/pgstore/pgtest"
)

// Tokens of the decider under test.
const (
	decideToken = "clients-decide-token"
	adminToken  = "clients-admin-token"
	viewerToken = "clients-viewer-token"
	// maxTokenIDs is the decider's -max-token-ids: small, so TOO_MANY_TOKEN_IDS is cheap to hit.
	maxTokenIDs = 1000
)

// EnvPython names the clients venv's python (scripts/lib/clients.sh, clients_venv_setup).
const EnvPython = "SLUICE_TEST_CLIENTS_PYTHON"

// seed is the configuration the suites start from. Each suite has its own tight model (one
// engine, at most one request in flight) for the admission and lease round trips, so the two
// suites do not see each other's leases. The engines' URLs are never dialled: probing is off
// and new engines are trusted.
const seed = `
workers:
  - {id: chat-a, url: "http://127.0.0.1:9", models: [chat], role: plain}
  - {id: chat-b, url: "http://127.0.0.1:9", models: [chat], role: plain}
  - {id: tight-py-1, url: "http://127.0.0.1:9", models: [tight-py], role: plain}
  - {id: tight-ts-1, url: "http://127.0.0.1:9", models: [tight-ts], role: plain}
  - {id: prefill-1, url: "http://127.0.0.1:9", models: [pd], role: prefill, bootstrap_port: 8998}
  - {id: decode-1, url: "http://127.0.0.1:9", models: [pd], role: decode}
buckets:
  - id: chat
    rank: 10
    models: [chat]
    limits: {min: 0, max: 4096}
    max_context_tokens: 8192
    groups:
      plain:
        worker_ids: [chat-a, chat-b]
        policy: {type: round_robin}
  - id: tight-py
    rank: 20
    models: [tight-py]
    groups:
      plain:
        worker_ids: [tight-py-1]
        policy: {type: round_robin, admission: {max_inflight_requests: 1}}
  - id: tight-ts
    rank: 21
    models: [tight-ts]
    groups:
      plain:
        worker_ids: [tight-ts-1]
        policy: {type: round_robin, admission: {max_inflight_requests: 1}}
  - id: pd
    rank: 30
    models: [pd]
    groups:
      pd:
        prefill: {worker_ids: [prefill-1], policy: {type: power_of_two}}
        decode: {worker_ids: [decode-1], policy: {type: power_of_two}}
`

// shardSeed is the configuration of the model-sharded pair (ShardedDecider, WRONG_SHARD): an
// unsharded decider ("home") and two deciders of shard a, on one Postgres schema of their own.
// Shard a lists both (a lease lives on the one that granted it), shard b lists none and has no replica; un-* belong to no shard.
// Each suite has its own models (-py, -ts), and move-* is the one its suite moves out of shard a.
const shardSeed = `
workers:
  - {id: sh-1, url: "http://127.0.0.1:9", models: [un-py, un-ts, a-py, a-ts, a-go, move-py, move-ts, b-only], role: plain}
buckets:
  - id: sharded
    models: [un-py, un-ts, a-py, a-ts, a-go, move-py, move-ts, b-only]
    groups:
      plain:
        worker_ids: [sh-1]
        policy: {type: round_robin}
shards:
  - {id: a, models: [a-py, a-ts, a-go, move-py, move-ts], deciders: ["SHARD_A_GRPC", "SHARD_A2_GRPC"]}
  - {id: b, models: [b-only]}
`

// decider is the running decider the suites are pointed at, and a second one that sheds every
// Decide beyond one in progress (-max-concurrent-decides 1), for the overload tests: a suite
// holds its one slot with a REST Decide whose body never ends. shardHome*, shardA* and shardA2* are
// the model-sharded deciders of shardSeed.
type decider struct {
	grpcAddr, httpAddr           string
	shedGRPCAddr, shedHTTPAddr   string
	closedAddr                   string // a loopback port nobody listens on
	shardHomeGRPC, shardHomeHTTP string
	shardAGRPC, shardAHTTP       string
	shardA2GRPC, shardA2HTTP     string
}

// env is what the suites read.
func (d decider) env() []string {
	return append(proctest.ChildEnv(),
		"SLUICE_CLIENTS_GRPC="+d.grpcAddr,
		"SLUICE_CLIENTS_HTTP=http://"+d.httpAddr,
		"SLUICE_CLIENTS_CLOSED="+d.closedAddr,
		"SLUICE_CLIENTS_SHED_GRPC="+d.shedGRPCAddr,
		"SLUICE_CLIENTS_SHED_HTTP="+d.shedHTTPAddr,
		"SLUICE_CLIENTS_DECIDE_TOKEN="+decideToken,
		"SLUICE_CLIENTS_ADMIN_TOKEN="+adminToken,
		"SLUICE_CLIENTS_VIEWER_TOKEN="+viewerToken,
		"SLUICE_CLIENTS_MAX_TOKEN_IDS="+strconv.Itoa(maxTokenIDs),
		"SLUICE_CLIENTS_SHARD_HOME="+d.shardHomeGRPC,
		"SLUICE_CLIENTS_SHARD_HOME_HTTP=http://"+d.shardHomeHTTP,
		"SLUICE_CLIENTS_SHARD_A="+d.shardAGRPC,
		"SLUICE_CLIENTS_SHARD_A_HTTP=http://"+d.shardAHTTP,
		"SLUICE_CLIENTS_SHARD_A2="+d.shardA2GRPC,
		"SLUICE_CLIENTS_SHARD_A2_HTTP=http://"+d.shardA2HTTP,
	)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// startDecider runs a decider on the test's Postgres schema, seeded through the admin API.
func startDecider(t *testing.T) decider {
	t.Helper()
	dsn := pgtest.SchemaDSN(t) // its cleanup runs after the process stopped
	dir := t.TempDir()
	bin := proctest.BuildSluice(t, dir)
	procs := proctest.NewSet(t, dir, proctest.Options{StopGrace: 5 * time.Second, TailLines: 80})
	ports := proctest.FreePorts(t, 11)
	d := decider{
		grpcAddr:      "127.0.0.1:" + strconv.Itoa(ports[0]),
		httpAddr:      "127.0.0.1:" + strconv.Itoa(ports[1]),
		closedAddr:    "127.0.0.1:" + strconv.Itoa(ports[2]),
		shedGRPCAddr:  "127.0.0.1:" + strconv.Itoa(ports[3]),
		shedHTTPAddr:  "127.0.0.1:" + strconv.Itoa(ports[4]),
		shardHomeGRPC: "127.0.0.1:" + strconv.Itoa(ports[5]),
		shardHomeHTTP: "127.0.0.1:" + strconv.Itoa(ports[6]),
		shardAGRPC:    "127.0.0.1:" + strconv.Itoa(ports[7]),
		shardAHTTP:    "127.0.0.1:" + strconv.Itoa(ports[8]),
		shardA2GRPC:   "127.0.0.1:" + strconv.Itoa(ports[9]),
		shardA2HTTP:   "127.0.0.1:" + strconv.Itoa(ports[10]),
	}
	p := procs.Start(t, "decider", proctest.ChildEnv(), bin, "decider",
		"-grpc-addr", d.grpcAddr, "-http-addr", d.httpAddr,
		"-postgres-dsn", dsn, "-config-snapshot", "-",
		"-decide-token", decideToken, "-admin-token", adminToken, "-viewer-token", viewerToken,
		"-probe-interval", "0", "-trust-new-engines", "-breaker-failures", "0",
		"-max-token-ids", strconv.Itoa(maxTokenIDs),
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug")
	seedFile := filepath.Join(dir, "shed.yaml")
	if err := os.WriteFile(seedFile, []byte(seed), 0o644); err != nil {
		t.Fatal(err)
	}
	shed := procs.Start(t, "decider-shed", proctest.ChildEnv(), bin, "decider",
		"-grpc-addr", d.shedGRPCAddr, "-http-addr", d.shedHTTPAddr,
		"-config", seedFile, "-config-snapshot", "-",
		"-decide-token", decideToken, "-probe-interval", "0", "-trust-new-engines",
		"-max-concurrent-decides", "1", "-shed-retry-after", "1s",
		"-shutdown-timeout", "1s", "-log-format", "text", "-log-level", "debug")
	quick := &http.Client{Timeout: 5 * time.Second}
	proctest.WaitHTTP(t, quick, shed, "http://"+d.shedHTTPAddr+"/readyz", 30*time.Second)
	proctest.WaitHTTP(t, quick, p, "http://"+d.httpAddr+"/readyz", 30*time.Second)
	api := proctest.Decider{Addr: d.httpAddr, Token: adminToken, Client: quick}
	var applied sluicev1.ApplyConfigResponse
	api.Call(t, http.MethodPut, "/v1/admin/config", &sluicev1.ApplyConfigRequest{Document: seed}, &applied)
	t.Logf("decider on grpc %s, http %s; seeded config version %d", d.grpcAddr, d.httpAddr, applied.GetVersion())
	startShards(t, procs, bin, d)
	return d
}

// startShards runs shardSeed's pair on a Postgres schema of its own: the unsharded decider
// first (a sharded one refuses to start on a configuration without its shard), seeded through
// its admin API, then shard a's two. All follow the store, so a suite's ApplyConfig reaches both.
func startShards(t *testing.T, procs *proctest.Set, bin string, d decider) {
	t.Helper()
	dsn := pgtest.SchemaDSN(t)
	common := []string{"-postgres-dsn", dsn, "-config-snapshot", "-",
		"-decide-token", decideToken, "-admin-token", adminToken, "-viewer-token", viewerToken,
		"-probe-interval", "0", "-trust-new-engines", "-breaker-failures", "0",
		"-shutdown-timeout", "2s", "-log-format", "text", "-log-level", "debug"}
	quick := &http.Client{Timeout: 5 * time.Second}
	home := procs.Start(t, "decider-shard-home", proctest.ChildEnv(), bin,
		append([]string{"decider", "-grpc-addr", d.shardHomeGRPC, "-http-addr", d.shardHomeHTTP}, common...)...)
	proctest.WaitHTTP(t, quick, home, "http://"+d.shardHomeHTTP+"/readyz", 30*time.Second)
	api := proctest.Decider{Addr: d.shardHomeHTTP, Token: adminToken, Client: quick}
	var applied sluicev1.ApplyConfigResponse
	api.Call(t, http.MethodPut, "/v1/admin/config",
		&sluicev1.ApplyConfigRequest{Document: strings.NewReplacer("SHARD_A_GRPC", d.shardAGRPC, "SHARD_A2_GRPC", d.shardA2GRPC).Replace(shardSeed)}, &applied)
	for i, addr := range [][2]string{{d.shardAGRPC, d.shardAHTTP}, {d.shardA2GRPC, d.shardA2HTTP}} {
		a := procs.Start(t, "decider-shard-a"+strconv.Itoa(i+1), proctest.ChildEnv(), bin,
			append([]string{"decider", "-shard", "a", "-grpc-addr", addr[0], "-http-addr", addr[1]}, common...)...)
		proctest.WaitHTTP(t, quick, a, "http://"+addr[1]+"/readyz", 30*time.Second)
	}
	t.Logf("sharded deciders: unsharded on grpc %s, shard a on grpc %s and %s; config version %d",
		d.shardHomeGRPC, d.shardAGRPC, d.shardA2GRPC, applied.GetVersion())
}

// run runs a suite's command in dir, its output in the test log; it fails the test when the
// command does.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s (%v):\n%s", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("%s %s: %v (output above)", filepath.Base(name), strings.Join(args, " "), err)
	}
}

// need ends the test for want of a tool: a failure in CI and whenever the tests
// run through scripts/test.sh (SLUICE_TEST_SCRIPTS is set), a skip in a bare `go test`.
func need(t *testing.T, what, hint string) {
	t.Helper()
	if testenv.InCI() || os.Getenv("SLUICE_TEST_SCRIPTS") != "" {
		t.Fatalf("%s: %s", what, hint)
	}
	t.Skipf("%s: %s", what, hint)
}

// copyPythonPackage copies what pip builds clients/python from (pyproject.toml, README.md,
// src/) into a temporary directory and returns it.
func copyPythonPackage(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "python")
	if err := os.CopyFS(filepath.Join(dst, "src"), os.DirFS(filepath.Join(dir, "src"))); err != nil {
		t.Fatalf("copy clients/python/src: %v", err)
	}
	for _, f := range []string{"pyproject.toml", "README.md"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestClients runs the Python (pytest) and TypeScript (node --test) suites against one decider.
func TestClients(t *testing.T) {
	root := repoRoot(t)
	python := os.Getenv(EnvPython)
	if python == "" {
		need(t, EnvPython+" is not set", "run through scripts/test.sh, which installs the clients venv (scripts/lib/clients.sh)")
	}
	tsDeps := filepath.Join(root, "clients", "ts", "node_modules", "@connectrpc", "connect-node")
	if _, err := os.Stat(tsDeps); err != nil {
		need(t, "clients/ts/node_modules is not installed ("+tsDeps+" missing)", "run through scripts/test.sh, which runs npm ci there (scripts/lib/clients.sh)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "node is not on PATH", "install Node.js 20 or later")
	}
	d := startDecider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("go", func(t *testing.T) { goShardedReleases(t, ctx, d) })
	t.Run("python", func(t *testing.T) {
		// Installed as a user installs it, from a copy of the source tree (setuptools builds in
		// the tree, and a build/ left there could bring back removed modules), into a
		// directory of its own (the shared venv stays as the requirements file made it).
		src := copyPythonPackage(t, filepath.Join(root, "clients", "python"))
		site := t.TempDir()
		run(t, ctx, root, proctest.ChildEnv(), python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
			"--no-deps", "--no-build-isolation", "--no-index", "--target", site, src)
		env := append(d.env(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
		run(t, ctx, filepath.Join(root, "clients", "python"), env, python,
			"-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "tests")
	})
	t.Run("typescript", func(t *testing.T) {
		run(t, ctx, filepath.Join(root, "clients", "ts"), d.env(), node, "--test", "--test-concurrency=1", "--test-reporter=spec", "tests/")
	})
	t.Run("browser", func(t *testing.T) { runBrowser(t, ctx, root, d) })
}

// goShardedReleases: the Go client over shard a's two real deciders (a-go's route set up front,
// then learned from a WRONG_SHARD) spreads Decide over both, and each Release reaches the
// decider that granted its lease: every one is answered released: true. Releases go in the
// reverse order, so a client that merely alternated replicas would not pair them up by chance.
func goShardedReleases(t *testing.T, ctx context.Context, d decider) {
	home, err := deciderclient.Dial(d.shardHomeGRPC, deciderclient.WithToken(decideToken), deciderclient.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	for _, how := range []string{"SetModelDeciders", "WRONG_SHARD"} {
		s := deciderclient.NewSharded(home, deciderclient.WithToken(decideToken), deciderclient.WithTimeout(10*time.Second))
		if how == "SetModelDeciders" {
			if err := s.SetModelDeciders("a-go", []string{d.shardAGRPC, d.shardA2GRPC}); err != nil {
				t.Fatal(err)
			}
		}
		var leases []string
		for range 32 {
			resp, err := s.Decide(ctx, &sluicev1.DecideRequest{Model: "a-go", InputTokens: 16})
			if err != nil {
				t.Fatalf("%s: Decide(a-go): %v", how, err)
			}
			leases = append(leases, resp.GetLeaseId())
		}
		released := 0
		for i := len(leases) - 1; i >= 0; i-- {
			ok, err := s.Release(ctx, "a-go", leases[i], sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS)
			if err != nil {
				t.Fatalf("%s: Release: %v", how, err)
			}
			if ok {
				released++
			}
		}
		if released != len(leases) {
			t.Errorf("%s: %d of %d releases answered released: true; want all, each on the decider that granted it", how, released, len(leases))
		}
		_ = s.Close()
	}
	for _, addr := range []string{d.shardAHTTP, d.shardA2HTTP} {
		if n := decidesServed(t, addr); n == 0 {
			t.Errorf("shard a's decider %s served no Decide; want both to take them", addr)
		}
	}
}

// decidesServed is the decider at httpAddr's count of Decide calls answered ok.
func decidesServed(t *testing.T, httpAddr string) float64 {
	t.Helper()
	return metrictest.Sum(t, "http://"+httpAddr+"/metrics", viewerToken, "sluice_decider_decisions_total", map[string]string{"outcome": "ok"})
}
