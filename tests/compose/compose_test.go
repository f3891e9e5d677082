// Package compose validates docker-compose.yaml without a Docker engine: it loads the file
// with compose-go (the Docker CLI's own loader), builds the sluice binary, and checks every
// service's command and environment against the flags `sluice <cmd> -help` reports, along with
// depends_on, health checks, published ports, cross-service references and the configuration
// file the stack applies. The package has only tests.
package compose

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	buildOnce sync.Once
	builtCLI  *sluiceCLI
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// sluiceBinary builds ./services/sluice once per test binary and reads its help.
func sluiceBinary(t *testing.T) *sluiceCLI {
	t.Helper()
	root := repoRoot(t)
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "composecheck-"); buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "sluice")
		cmd := exec.Command("go", "build", "-o", bin, "./services/sluice")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./services/sluice: %w\n%s", err, out)
			return
		}
		builtCLI, buildErr = newSluiceCLI(bin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtCLI
}

// loadProject loads a compose file the way `docker compose config` does, without the host's
// environment or a .env file, so ${VAR:-default} resolve to their defaults.
func loadProject(t *testing.T, path string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path},
		cli.WithWorkingDirectory(filepath.Dir(path)),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s does not load or validate: %v", filepath.Base(path), err)
	}
	return p
}

func composeProject(t *testing.T) *types.Project {
	return loadProject(t, filepath.Join(repoRoot(t), "docker-compose.yaml"))
}

func TestComposeFile(t *testing.T) {
	sl := sluiceBinary(t)
	p := composeProject(t)
	for _, problem := range checkProject(p, repoRoot(t), sl, readDockerfile(t)) {
		t.Error(problem)
	}
}

// TestComposeStack pins the shape the issue asks for, so a later edit cannot quietly drop part
// of the stack: the services run what they should.
func TestComposeStack(t *testing.T) {
	sl := sluiceBinary(t)
	p := composeProject(t)
	c := &checker{p: p, root: repoRoot(t), cli: sl, stages: readDockerfile(t), invs: map[string]*invocation{}}
	c.findSluiceServices()
	for _, name := range sortedKeys(p.Services) {
		if c.sluice[name] {
			c.parseInvocation(name, p.Services[name])
		}
	}
	count := map[string][]string{}
	for name, inv := range c.invs {
		count[inv.key] = append(count[inv.key], name)
	}
	if n := len(count["decider"]); n < 2 {
		t.Errorf("want at least two decider replicas, have %d: %v", n, count["decider"])
	}
	if len(count["gateway"]) != 1 {
		t.Errorf("want one gateway, have %v", count["gateway"])
	}
	if len(count["ctl apply"]) != 1 {
		t.Errorf("want one `sluice ctl apply` job, have %v", count["ctl apply"])
	}
	roles := map[string]int{}
	for _, name := range count["simengine"] {
		roles[c.invs[name].value["role"]]++
	}
	if roles["plain"] < 2 || roles["prefill"] < 1 || roles["decode"] < 1 {
		t.Errorf("want two plain simengines, a prefill and a decode one; have roles %v", roles)
	}
	images := map[string]string{}
	for name, s := range p.Services {
		if !c.sluice[name] {
			images[strings.SplitN(s.Image, ":", 2)[0]] = name
		}
	}
	for _, img := range []string{"postgres", "apache/kafka"} {
		if images[img] == "" {
			t.Errorf("no service runs the official %s image", img)
		}
	}
	if s, ok := p.Services[images["postgres"]]; ok && !strings.HasPrefix(s.Image, "postgres:16") {
		t.Errorf("service %q: image %q, want postgres:16", images["postgres"], s.Image)
	}
	for _, name := range sortedKeys(c.invs) {
		inv := c.invs[name]
		if inv.command == "decider" {
			if inv.value["postgres-dsn"] == "" && inv.env["DATABASE_URL"] == "" {
				t.Errorf("service %q: decider without the Postgres store (-postgres-dsn or DATABASE_URL)", name)
			}
			if inv.value["kafka-brokers"] == "" || inv.value["snapshot-dir"] == "" || inv.value["admin-token"] == "" {
				t.Errorf("service %q: decider needs -kafka-brokers, -snapshot-dir and -admin-token", name)
			}
		}
		if inv.command == "simengine" && inv.value["kafka-brokers"] == "" {
			// The production path: KV events over ZMQ, carried into Kafka by enginelink.
			if inv.value["kv-events-endpoint"] == "" {
				t.Errorf("service %q: simengine publishes neither to Kafka (-kafka-brokers) nor over ZMQ (-kv-events-endpoint)", name)
			}
			if len(count["enginelink"]) == 0 {
				t.Errorf("service %q: simengine publishes over ZMQ but no enginelink service carries it into Kafka", name)
			}
		}
		if inv.command == "enginelink" {
			if inv.value["kafka-brokers"] == "" || (inv.value["fleet-admin-url"] == "" && inv.value["engines"] == "" && inv.value["engine"] == "") {
				t.Errorf("service %q: enginelink needs -kafka-brokers and engines to follow (-fleet-admin-url, -engines or -engine)", name)
			}
		}
		if inv.key == "ctl apply" && p.Services[name].Restart != types.RestartPolicyNo {
			t.Errorf("service %q: one-shot job needs restart: \"no\", has %q", name, p.Services[name].Restart)
		}
	}
}

// mutate loads the compose file, applies edit to one service and returns the problems.
func mutate(t *testing.T, service string, edit func(s *types.ServiceConfig)) []string {
	t.Helper()
	p := composeProject(t)
	s, ok := p.Services[service]
	if !ok {
		t.Fatalf("no service %q", service)
	}
	edit(&s)
	p.Services[service] = s
	return checkProject(p, repoRoot(t), sluiceBinary(t), readDockerfile(t))
}

func strptr(s string) *string { return &s }

// TestChecksCatch proves each check fires, with a message naming the service and the flag.
func TestChecksCatch(t *testing.T) {
	cases := []struct {
		name, service string
		edit          func(s *types.ServiceConfig)
		want          []string
	}{
		{"unknown flag", "decider-1", func(s *types.ServiceConfig) {
			s.Command = append(s.Command, "-kafka-broker", "kafka:9092")
		}, []string{`"decider-1"`, "flag -kafka-broker is not accepted by `sluice decider`"}},
		{"unknown subcommand", "gateway", func(s *types.ServiceConfig) {
			s.Command[0] = "gw"
		}, []string{`"gateway"`, `"gw" is not a sluice subcommand`}},
		{"flag of another subcommand", "sim-plain-1", func(s *types.ServiceConfig) {
			s.Command = append(s.Command, "--decider-addr", "decider-1:7070")
		}, []string{`"sim-plain-1"`, "flag -decider-addr is not accepted by `sluice simengine`"}},
		{"bad value", "decider-2", func(s *types.ServiceConfig) {
			s.Environment["SLUICE_LEASE_TTL"] = strptr("ten minutes")
		}, []string{`"decider-2"`, "SLUICE_LEASE_TTL", "-lease-ttl", "not a valid duration"}},
		{"unknown env", "gateway", func(s *types.ServiceConfig) {
			s.Environment["SLUICE_DECIDER_ADDRESS"] = strptr("decider-1:7070")
		}, []string{`"gateway"`, "SLUICE_DECIDER_ADDRESS is not read by `sluice gateway`"}},
		{"env without fallback", "config-init", func(s *types.ServiceConfig) {
			s.Environment["SLUICE_TIMEOUT"] = strptr("1m")
		}, []string{`"config-init"`, "SLUICE_TIMEOUT", "-timeout exists but"}},
		{"positional stops flags", "sim-decode", func(s *types.ServiceConfig) {
			s.Command = append([]string{"simengine", "decode"}, s.Command[1:]...)
		}, []string{`"sim-decode"`, `argument "decode"`}},
		{"flag and env", "gateway", func(s *types.ServiceConfig) {
			s.Command = append(s.Command, "-addr", ":8080")
		}, []string{`"gateway"`, "-addr is set both", "SLUICE_ADDR"}},
		{"missing depends_on target", "gateway", func(s *types.ServiceConfig) {
			s.DependsOn["decider-3"] = types.ServiceDependency{Condition: types.ServiceConditionHealthy}
		}, []string{`"gateway"`, `depends_on "decider-3": no such service`}},
		{"no healthcheck", "sim-plain-2", func(s *types.ServiceConfig) {
			s.HealthCheck = nil
		}, []string{`"sim-plain-2"`, "no healthcheck"}},
		{"healthcheck wrong port", "decider-1", func(s *types.ServiceConfig) {
			s.HealthCheck.Test[len(s.HealthCheck.Test)-1] = "http://127.0.0.1:7070/readyz"
		}, []string{`"decider-1"`, "healthcheck", `"7080"`, "-http-addr"}},
		{"gateway to wrong decider port", "gateway", func(s *types.ServiceConfig) {
			s.Command[2] = "decider-1:7080"
		}, []string{`"gateway"`, "-decider-addr", "grpc-addr"}},
		{"gateway to unknown host", "gateway", func(s *types.ServiceConfig) {
			s.Command[2] = "localhost:7070"
		}, []string{`"gateway"`, "-decider-addr", "container itself"}},
		{"gateway without a decider token", "gateway", func(s *types.ServiceConfig) {
			delete(s.Environment, "SLUICE_DECIDER_TOKEN")
		}, []string{`"gateway"`, "-tokenizer engine", "-decider-token (default)", "viewer"}},
		{"ctl with the wrong token", "config-init", func(s *types.ServiceConfig) {
			s.Environment["SLUICE_TOKEN"] = strptr("guess")
		}, []string{`"config-init"`, "-token", "admin tokens"}},
		{"simengine id differs from config", "sim-prefill", func(s *types.ServiceConfig) {
			i := slices.Index(s.Command, "-id")
			s.Command[i+1] = "prefill-0"
		}, []string{`"config-init"`, `worker "sim-prefill"`, "-id", `"prefill-0"`}},
		{"bootstrap port differs from config", "sim-prefill", func(s *types.ServiceConfig) {
			i := slices.Index(s.Command, "-bootstrap-port")
			s.Command[i+1] = "9000"
		}, []string{`"config-init"`, "bootstrap_port 8998", "-bootstrap-port"}},
		{"config not mounted", "config-init", func(s *types.ServiceConfig) {
			s.Volumes = nil
		}, []string{`"config-init"`, "-f", "not bind-mounted"}},
		{"published port nobody listens on", "sim-plain-1", func(s *types.ServiceConfig) {
			s.Ports = []types.ServicePortConfig{{Target: 9000, Published: "9000", Protocol: "tcp"}}
		}, []string{`"sim-plain-1"`, "container port 9000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			problems := mutate(t, tc.service, tc.edit)
			for _, p := range problems {
				if containsAll(p, tc.want) {
					return
				}
			}
			t.Errorf("no problem mentions all of %q; got:\n%s", tc.want, strings.Join(problems, "\n"))
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestBadConfigFile: a mounted configuration that does not validate is reported with the
// problem config.Validate finds.
func TestBadConfigFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("workers:\n  - {id: sim-plain-1, url: \"http://sim-plain-1:8000\", models: [sim-chat], role: plane}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems := mutate(t, "config-init", func(s *types.ServiceConfig) {
		s.Volumes = []types.ServiceVolumeConfig{{Type: types.VolumeTypeBind, Source: bad, Target: "/etc/sluice/sluice.yaml"}}
	})
	for _, p := range problems {
		if containsAll(p, []string{`"config-init"`, "does not parse and validate", "role"}) {
			return
		}
	}
	t.Errorf("the invalid role was not reported; got:\n%s", strings.Join(problems, "\n"))
}

// TestSmokeOverride loads docker-compose.yaml with the compose phase's override
// (deploy/compose/smoke.yaml) and the variables scripts/lib/compose.sh sets: the images come
// from the variables, every published port is on loopback at the port the script picked, and
// Kafka advertises that port.
func TestSmokeOverride(t *testing.T) {
	root := repoRoot(t)
	env := []string{
		"SLUICE_IMAGE=sluice:compose-smoke", "SLUICE_POSTGRES_IMAGE=sluice-standin/postgres:local",
		"SLUICE_KAFKA_IMAGE=sluice-standin/kafka:local", "SLUICE_RUNTIME_IMAGE=sluice-standin/base:bookworm",
	}
	ports := map[string]string{}
	for i, name := range []string{"GATEWAY", "DECIDER1_GRPC", "DECIDER1_HTTP", "DECIDER2_GRPC", "DECIDER2_HTTP",
		"KAFKA", "SIM_PLAIN_1", "SIM_PLAIN_2"} {
		ports[name] = fmt.Sprint(41000 + i)
		env = append(env, "SLUICE_SMOKE_"+name+"_PORT="+ports[name])
	}
	opts, err := cli.NewProjectOptions(
		[]string{filepath.Join(root, "docker-compose.yaml"), filepath.Join(root, "deploy", "compose", "smoke.yaml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(env), cli.WithInterpolation(true),
		cli.WithNormalization(true), cli.WithResolvedPaths(true), cli.WithConsistency(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yaml + deploy/compose/smoke.yaml do not load: %v", err)
	}
	published := map[string]string{}
	for _, name := range sortedKeys(p.Services) {
		s := p.Services[name]
		for _, pc := range s.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("service %q: port %d published on %q, want 127.0.0.1 in the smoke test", name, pc.Target, pc.HostIP)
			}
			published[fmt.Sprintf("%s:%d", name, pc.Target)] = pc.Published
		}
		switch {
		case name == "postgres":
			if s.Image != "sluice-standin/postgres:local" {
				t.Errorf("postgres image %q, want SLUICE_POSTGRES_IMAGE", s.Image)
			}
		case strings.HasPrefix(name, "kafka"):
			if s.Image != "sluice-standin/kafka:local" {
				t.Errorf("%s image %q, want SLUICE_KAFKA_IMAGE", name, s.Image)
			}
		default:
			if s.Image != "sluice:compose-smoke" {
				t.Errorf("%s image %q, want SLUICE_IMAGE", name, s.Image)
			}
			if s.Build == nil || s.Build.Args["RUNTIME_IMAGE"] == nil || *s.Build.Args["RUNTIME_IMAGE"] != "sluice-standin/base:bookworm" {
				t.Errorf("%s: build arg RUNTIME_IMAGE does not come from SLUICE_RUNTIME_IMAGE: %v", name, s.Build)
			}
		}
	}
	for key, want := range map[string]string{"gateway:8080": "GATEWAY", "decider-1:7070": "DECIDER1_GRPC", "decider-1:7080": "DECIDER1_HTTP",
		"decider-2:7070": "DECIDER2_GRPC", "decider-2:7080": "DECIDER2_HTTP", "kafka:29092": "KAFKA",
		"sim-plain-1:8000": "SIM_PLAIN_1", "sim-plain-2:8000": "SIM_PLAIN_2"} {
		if published[key] != ports[want] {
			t.Errorf("%s published on %q, want SLUICE_SMOKE_%s_PORT (%s); all: %v", key, published[key], want, ports[want], published)
		}
	}
	if len(published) != 8 {
		t.Errorf("published ports %v: want exactly the eight the override names (its !override replaces the defaults)", published)
	}
	// The merged stack passes every static check the plain file does (health checks kept their
	// commands, the gateway's extra variable is a real flag's).
	for _, problem := range checkProject(p, root, sluiceBinary(t), readDockerfile(t)) {
		t.Errorf("with deploy/compose/smoke.yaml: %s", problem)
	}
	for _, name := range sortedKeys(p.Services) {
		if hc := p.Services[name].HealthCheck; hc != nil && (hc.Interval == nil || time.Duration(*hc.Interval) > 3*time.Second) {
			t.Errorf("service %q: smoke health check interval %v, want <= 3s so up --wait returns soon after the stack is ready", name, hc.Interval)
		}
	}
	if adv := p.Services["kafka"].Environment["KAFKA_ADVERTISED_LISTENERS"]; adv == nil || !strings.Contains(*adv, "127.0.0.1:"+ports["KAFKA"]) {
		t.Errorf("kafka advertises %v, want the published port %s", adv, ports["KAFKA"])
	}
}
