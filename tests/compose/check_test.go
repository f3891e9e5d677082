package compose

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/state/config"
)

// What the checks know about sluice beyond its -help output: which flags listen, which name
// another service, which health paths each command serves, which non-SLUICE_ variables it reads.
var (
	// listenFlags are each command's listen flags; the first serves HTTP (health checks).
	listenFlags = map[string][]string{
		"decider":   {"http-addr", "grpc-addr"},
		"gateway":   {"addr"},
		"simengine": {"addr", "bootstrap-port"},
	}
	healthPaths = map[string][]string{
		"decider":   {"/healthz", "/readyz"},
		"gateway":   {"/healthz", "/readyz"},
		"simengine": {"/health"},
	}
	// extraEnv are variables a command reads that are not SLUICE_* flag fallbacks; each must
	// still be mentioned in the command's -help so the binary is seen to read it.
	extraEnv = map[string][]string{
		"decider": {"DATABASE_URL"},
	}
	// references are flags whose value names another service, by command ("ctl" covers every
	// ctl verb), with what the named service must be.
	references = map[string]map[string]refKind{
		"decider":   {"kafka-brokers": refKafka, "postgres-dsn": refAny},
		"simengine": {"kafka-brokers": refKafka},
		"gateway":   {"decider-addr": refDeciderGRPC, "tokenizer-url": refEngine},
		"ctl":       {"server": refDeciderHTTP},
	}
	// configFlags name a configuration file the command reads.
	configFlags = map[string]string{
		"decider":      "config",
		"ctl apply":    "f",
		"ctl validate": "f",
		"ctl diff":     "f",
	}
)

type refKind int

const (
	refAny refKind = iota
	refKafka
	refDeciderGRPC
	refDeciderHTTP
	refEngine
)

// invocation is one sluice service's command line and environment, resolved against the flags
// the binary accepts.
type invocation struct {
	service string
	command string // decider, gateway, simengine, ctl
	key     string // command, or "ctl <verb>"
	spec    *cmdSpec
	// value holds every flag's effective value: command line, else environment, else default.
	value map[string]string
	// origin says where a set flag came from: "command" or "environment NAME".
	origin map[string]string
	env    map[string]string // the service's resolved environment
}

func (inv *invocation) flagRef(name string) string {
	if o := inv.origin[name]; o != "" {
		return fmt.Sprintf("-%s (%s)", name, o)
	}
	return fmt.Sprintf("-%s (default)", name)
}

// checker collects the problems of one project.
type checker struct {
	p        *types.Project
	root     string
	cli      *sluiceCLI
	stages   []*dockerStage
	problems []string

	sluice   map[string]bool // services running the sluice image
	invs     map[string]*invocation
	oneShots map[string]bool
}

func (c *checker) addf(service, format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf("service %q: ", service)+fmt.Sprintf(format, args...))
}

// checkProject runs every check and returns the problems, each naming its service.
func checkProject(p *types.Project, root string, cli *sluiceCLI, stages []*dockerStage) []string {
	c := &checker{p: p, root: root, cli: cli, stages: stages, invs: map[string]*invocation{}}
	c.findSluiceServices()
	for _, name := range sortedKeys(p.Services) {
		if c.sluice[name] {
			c.parseInvocation(name, p.Services[name])
		}
	}
	c.checkDependencies()
	c.checkHealthchecks()
	c.checkPorts()
	c.checkReferences()
	c.checkConfigFiles()
	c.checkTopics()
	return c.problems
}

func samePath(a, b string) bool {
	ea, err1 := filepath.EvalSymlinks(a)
	eb, err2 := filepath.EvalSymlinks(b)
	if err1 == nil && err2 == nil {
		return ea == eb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// findSluiceServices marks services built from the repository root and services using the image
// such a build produces.
func (c *checker) findSluiceServices() {
	c.sluice = map[string]bool{}
	images := map[string]bool{}
	for name, s := range c.p.Services {
		if s.Build != nil && samePath(s.Build.Context, c.root) {
			c.sluice[name] = true
			if s.Image != "" {
				images[s.Image] = true
			}
		}
	}
	for name, s := range c.p.Services {
		if images[s.Image] {
			c.sluice[name] = true
		}
	}
	if len(c.sluice) == 0 {
		c.problems = append(c.problems, "no service builds the repository's Dockerfile (build.context: .) or uses its image")
	}
}

// stage returns the Dockerfile stage a sluice service runs.
func (c *checker) stage(name string) *dockerStage {
	s := c.p.Services[name]
	target := ""
	if s.Build != nil {
		target = s.Build.Target
	} else {
		for _, o := range c.p.Services {
			if o.Build != nil && o.Image == s.Image && samePath(o.Build.Context, c.root) {
				target = o.Build.Target
			}
		}
	}
	return stageFor(c.stages, target)
}

func (c *checker) parseInvocation(name string, s types.ServiceConfig) {
	argv := []string(s.Command)
	if len(s.Entrypoint) > 0 {
		if path.Base(s.Entrypoint[0]) != "sluice" {
			c.addf(name, "entrypoint %q does not run the sluice binary; cannot check its command", []string(s.Entrypoint))
			return
		}
		argv = append(slices.Clone([]string(s.Entrypoint[1:])), argv...)
	}
	if len(argv) == 0 {
		c.addf(name, "no command: bare `sluice` prints usage and exits 1; set command: [<subcommand>, …] (subcommands: %s)",
			strings.Join(sortedKeys(c.cli.commands), ", "))
		return
	}
	inv := &invocation{service: name, command: argv[0], key: argv[0], value: map[string]string{}, origin: map[string]string{}, env: map[string]string{}}
	if !c.cli.commands[argv[0]] {
		c.addf(name, "command %q: %q is not a sluice subcommand (subcommands: %s)", []string(argv), argv[0],
			strings.Join(sortedKeys(c.cli.commands), ", "))
		return
	}
	args := argv[1:]
	if inv.command == "ctl" {
		if len(args) == 0 || !c.cli.ctlVerbs[args[0]] {
			c.addf(name, "command %q: `sluice ctl` needs one of %s", []string(argv), strings.Join(sortedKeys(c.cli.ctlVerbs), ", "))
			return
		}
		inv.key = "ctl " + args[0]
		args = args[1:]
	}
	spec, err := c.cli.spec(inv.key)
	if err != nil {
		c.addf(name, "%v", err)
		return
	}
	inv.spec = spec
	c.invs[name] = inv

	// The command line. ctl parses flags interspersed with arguments; the server commands use
	// the flag package's Parse, which stops at the first non-flag argument and ignores the rest.
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if inv.command != "ctl" {
				c.addf(name, "command %q: argument %q: `sluice %s` takes no arguments, and every flag after it would be ignored",
					[]string(argv), a, inv.key)
				break
			}
			continue
		}
		fname, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := spec.flags[fname]
		if !ok {
			// The flag package stops here with a usage error, so nothing after it is parsed.
			c.addf(name, "flag -%s is not accepted by `sluice %s`, which would exit with a usage error (it accepts: %s)", fname, inv.key, spec.flagNames())
			break
		}
		if !f.isBool() && !hasVal {
			if i+1 >= len(args) {
				c.addf(name, "flag -%s of `sluice %s` needs a value", fname, inv.key)
				continue
			}
			i++
			val = args[i]
		} else if f.isBool() && !hasVal {
			val = "true"
		}
		if err := checkValue(f.typ, val); err != nil {
			c.addf(name, "flag -%s %q: %v", fname, val, err)
		}
		if prev, dup := inv.origin[fname]; dup && prev == "command" {
			c.addf(name, "flag -%s is given twice on the command line", fname)
		}
		inv.value[fname], inv.origin[fname] = val, "command"
	}

	// The environment: every variable must back a flag (or be one the command is known to read).
	for _, k := range sortedKeys(s.Environment) {
		v := ""
		if p := s.Environment[k]; p != nil {
			v = *p
		}
		inv.env[k] = v
		if slices.Contains(extraEnv[inv.command], k) {
			if !strings.Contains(spec.help, k) {
				c.addf(name, "environment %s: `sluice %s -help` no longer mentions it; is it still read?", k, inv.key)
			}
			continue
		}
		f, ok := spec.env[k]
		if !ok {
			hint := ""
			if strings.HasPrefix(k, "SLUICE_") {
				flagName := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "SLUICE_"), "_", "-"))
				if _, isFlag := spec.flags[flagName]; isFlag {
					hint = fmt.Sprintf(" (-%s exists but `sluice %s` reads no environment for it)", flagName, inv.key)
				} else {
					hint = fmt.Sprintf(" (no flag -%s)", flagName)
				}
			}
			c.addf(name, "environment %s is not read by `sluice %s`%s", k, inv.key, hint)
			continue
		}
		if want := flagenv.EnvName("SLUICE_", f.name); k != want {
			c.addf(name, "environment %s: -help says it backs -%s, whose flagenv name is %s", k, f.name, want)
		}
		if s.Environment[k] == nil {
			continue // passed through from the host; value unknown
		}
		if err := checkValue(f.typ, v); err != nil {
			c.addf(name, "environment %s=%q (flag -%s): %v", k, v, f.name, err)
		}
		if inv.origin[f.name] == "command" {
			c.addf(name, "flag -%s is set both on the command line and by environment %s; the command line wins", f.name, k)
			continue
		}
		inv.value[f.name], inv.origin[f.name] = v, "environment "+k
	}
	for fname, f := range spec.flags {
		if _, set := inv.value[fname]; !set {
			inv.value[fname] = f.def
		}
	}
}

// checkDependencies: depends_on targets exist; service_healthy targets have a health check;
// service_completed_successfully targets are one-shot jobs that do not restart.
func (c *checker) checkDependencies() {
	c.oneShots = map[string]bool{}
	for _, name := range sortedKeys(c.p.Services) {
		for _, dep := range sortedKeys(c.p.Services[name].DependsOn) {
			d := c.p.Services[name].DependsOn[dep]
			target, ok := c.p.Services[dep]
			if !ok {
				c.addf(name, "depends_on %q: no such service", dep)
				continue
			}
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if !hasHealthcheck(target) {
					c.addf(name, "depends_on %q with condition service_healthy, but %q has no healthcheck", dep, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
				c.oneShots[dep] = true
				if r := target.Restart; r == "always" || r == "unless-stopped" {
					c.addf(dep, "is waited for with service_completed_successfully (by %q) but has restart: %s; a one-shot job needs restart: \"no\"", name, r)
				}
			}
		}
	}
}

func hasHealthcheck(s types.ServiceConfig) bool {
	h := s.HealthCheck
	return h != nil && !h.Disable && len(h.Test) > 0 && h.Test[0] != "NONE"
}

// checkHealthchecks: every long-running service has one; a sluice service's probes its own HTTP
// listener on a path it serves, with a tool its image has.
func (c *checker) checkHealthchecks() {
	for _, name := range sortedKeys(c.p.Services) {
		s := c.p.Services[name]
		if c.oneShots[name] {
			continue
		}
		if !hasHealthcheck(s) {
			c.addf(name, "no healthcheck; every long-running service needs one (start ordering waits on it)")
			continue
		}
		inv := c.invs[name]
		if inv == nil {
			continue
		}
		test := []string(s.HealthCheck.Test)
		tool := ""
		switch test[0] {
		case "CMD":
			if len(test) > 1 {
				tool = test[1]
			}
		case "CMD-SHELL":
			if st := c.stage(name); st != nil && !st.hasShell() {
				c.addf(name, "healthcheck is CMD-SHELL but the image (%s) has no shell; use the exec form [\"CMD\", …]", st.base)
			}
			if f := strings.Fields(strings.Join(test[1:], " ")); len(f) > 0 {
				tool = f[0]
			}
		}
		if st := c.stage(name); st != nil && !st.hasShell() && path.Base(tool) != "sluice" {
			c.addf(name, "healthcheck runs %q but the image (%s) holds only the sluice binary", tool, st.base)
		}
		var probe *url.URL
		for _, w := range strings.Fields(strings.Join(test[1:], " ")) {
			if u, err := url.Parse(strings.Trim(w, `'"`)); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
				probe = u
			}
		}
		lf := listenFlags[inv.command]
		if probe == nil || len(lf) == 0 {
			if probe == nil {
				c.addf(name, "healthcheck %q probes no http:// URL, so the checks cannot tell it watches `sluice %s`", test, inv.key)
			}
			continue
		}
		if h := probe.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
			c.addf(name, "healthcheck URL %s: host %q is not the container itself (use 127.0.0.1)", probe, h)
		}
		if want := listenPort(inv.value[lf[0]]); probe.Port() != want {
			c.addf(name, "healthcheck URL %s: port %q, but `sluice %s` serves HTTP on %q (%s)", probe, probe.Port(), inv.key, want, inv.flagRef(lf[0]))
		}
		if paths := healthPaths[inv.command]; !slices.Contains(paths, probe.Path) {
			c.addf(name, "healthcheck URL %s: `sluice %s` serves health on %s, not %q", probe, inv.key, strings.Join(paths, " or "), probe.Path)
		}
	}
}

// listenPort returns the port of a listen flag value: ":7080", "0.0.0.0:7080" or a bare "8998".
func listenPort(v string) string {
	if _, p, err := net.SplitHostPort(v); err == nil {
		return p
	}
	return v
}

// checkPorts: a sluice service publishes only ports it listens on, and no two services publish
// the same host port.
func (c *checker) checkPorts() {
	published := map[string]string{}
	for _, name := range sortedKeys(c.p.Services) {
		for _, p := range c.p.Services[name].Ports {
			if p.Published != "" {
				key := p.HostIP + ":" + p.Published + "/" + p.Protocol
				if other, dup := published[key]; dup {
					c.addf(name, "publishes host port %s, which %q publishes too", p.Published, other)
				}
				published[key] = name
			}
			inv := c.invs[name]
			if inv == nil {
				continue
			}
			var listening []string
			for _, f := range listenFlags[inv.command] {
				listening = append(listening, listenPort(inv.value[f]))
			}
			if !slices.Contains(listening, strconv.Itoa(int(p.Target))) {
				c.addf(name, "publishes container port %d, but `sluice %s` listens on %v (%s)", p.Target, inv.key, listening,
					strings.Join(listenFlags[inv.command], ", "))
			}
		}
	}
}

// dependsOn reports whether service a waits for b, directly or through other services.
func (c *checker) dependsOn(a, b string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(s string) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		for d := range c.p.Services[s].DependsOn {
			if d == b || walk(d) {
				return true
			}
		}
		return false
	}
	return walk(a)
}

type hostPort struct{ host, port string }

// hostsOf extracts the hosts a reference flag names: comma-separated host:port, a URL, or a
// libpq key=value DSN.
func hostsOf(v string) []hostPort {
	var out []hostPort
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case strings.Contains(part, "://"):
			if u, err := url.Parse(part); err == nil {
				out = append(out, hostPort{u.Hostname(), u.Port()})
			}
		case strings.Contains(part, "host="):
			hp := hostPort{}
			for _, kv := range strings.Fields(part) {
				if k, val, ok := strings.Cut(kv, "="); ok && k == "host" {
					hp.host = val
				} else if ok && k == "port" {
					hp.port = val
				}
			}
			out = append(out, hp)
		default:
			if h, p, err := net.SplitHostPort(part); err == nil {
				out = append(out, hostPort{h, p})
			} else {
				out = append(out, hostPort{part, ""})
			}
		}
	}
	return out
}

// checkReferences: every flag naming another service names a compose service this one waits
// for, on the port that service listens on; ctl's token is one the decider accepts.
func (c *checker) checkReferences() {
	for _, name := range sortedKeys(c.invs) {
		inv := c.invs[name]
		refs := references[inv.command]
		type ref struct {
			what string
			v    string
			kind refKind
		}
		var list []ref
		for _, f := range sortedKeys(refs) {
			if v := inv.value[f]; v != "" {
				list = append(list, ref{inv.flagRef(f), v, refs[f]})
			}
		}
		if inv.command == "decider" && inv.value["postgres-dsn"] == "" && inv.env["DATABASE_URL"] != "" {
			list = append(list, ref{"DATABASE_URL", inv.env["DATABASE_URL"], refAny})
		}
		for _, r := range list {
			for _, hp := range hostsOf(r.v) {
				target, ok := c.p.Services[hp.host]
				if !ok {
					why := "is not a compose service"
					if hp.host == "localhost" || net.ParseIP(hp.host) != nil {
						why = "inside a container is the container itself, not another service"
					}
					c.addf(name, "%s = %q: host %q %s (services: %s)", r.what, r.v, hp.host, why, strings.Join(sortedKeys(c.p.Services), ", "))
					continue
				}
				if !c.dependsOn(name, hp.host) {
					c.addf(name, "%s names %q but does not depend on it (directly or through depends_on), so it may start first", r.what, hp.host)
				}
				c.checkRefTarget(name, r.what, hp, r.kind, target)
			}
		}
		if inv.command == "ctl" {
			c.checkToken(inv)
		}
		if inv.command == "gateway" {
			c.checkGatewayToken(inv)
		}
	}
}

// checkGatewayToken: a gateway with `-tokenizer engine` and no -tokenizer-url finds the engine
// to tokenize with through the decider's admin API (ListEngines), which takes an admin or viewer
// token once the decider has any. Without one every /tokenize lookup fails and the gateway
// silently routes by the byte estimate, without token ids: no prefix-cache routing at all.
func (c *checker) checkGatewayToken(inv *invocation) {
	if inv.value["tokenizer"] != "engine" || inv.value["tokenizer-url"] != "" {
		return
	}
	for _, hp := range hostsOf(inv.value["decider-addr"]) {
		d := c.invs[hp.host]
		if d == nil || d.command != "decider" || d.value["admin-tokens-file"] != "" {
			continue
		}
		var accepted []string
		for _, f := range []string{"admin-token", "viewer-token"} {
			for _, t := range strings.Split(d.value[f], ",") {
				if t = strings.TrimSpace(t); t != "" {
					accepted = append(accepted, t)
				}
			}
		}
		if len(accepted) > 0 && !slices.Contains(accepted, strings.TrimSpace(inv.value["decider-token"])) {
			c.addf(inv.service, "-tokenizer engine looks engines up on %q's admin API, but %s is none of its admin or viewer tokens: "+
				"every tokenization would fall back to the estimate (no prefix routing); set SLUICE_DECIDER_TOKEN to a viewer token",
				hp.host, inv.flagRef("decider-token"))
		}
	}
}

// checkToken: ctl authenticates with a token the decider it talks to accepts. Admin writes
// (apply, rollback) always need an admin token; reads need admin or viewer once any is set.
func (c *checker) checkToken(inv *invocation) {
	for _, hp := range hostsOf(inv.value["server"]) {
		d := c.invs[hp.host]
		if d == nil || d.command != "decider" || d.value["admin-tokens-file"] != "" {
			continue // tokens from a file cannot be read here
		}
		split := func(f string) []string {
			var out []string
			for _, t := range strings.Split(d.value[f], ",") {
				if t = strings.TrimSpace(t); t != "" {
					out = append(out, t)
				}
			}
			return out
		}
		admin, viewer := split("admin-token"), split("viewer-token")
		token := strings.TrimSpace(inv.value["token"])
		switch inv.key {
		case "ctl apply", "ctl rollback":
			if !slices.Contains(admin, token) {
				c.addf(inv.service, "%s is not one of %q's admin tokens (%s); `sluice %s` would be refused", inv.flagRef("token"), hp.host, d.flagRef("admin-token"), inv.key)
			}
		default:
			if len(admin)+len(viewer) > 0 && !slices.Contains(admin, token) && !slices.Contains(viewer, token) {
				c.addf(inv.service, "%s is none of %q's admin or viewer tokens; `sluice %s` would be refused", inv.flagRef("token"), hp.host, inv.key)
			}
		}
	}
}

func (c *checker) checkRefTarget(name, what string, hp hostPort, kind refKind, target types.ServiceConfig) {
	tinv := c.invs[hp.host]
	wantCmd := map[refKind]string{refDeciderGRPC: "decider", refDeciderHTTP: "decider", refEngine: "simengine"}[kind]
	if wantCmd != "" && (tinv == nil || tinv.command != wantCmd) {
		c.addf(name, "%s names %q, which does not run `sluice %s`", what, hp.host, wantCmd)
		return
	}
	var wantPort, via string
	switch kind {
	case refDeciderGRPC:
		wantPort, via = listenPort(tinv.value["grpc-addr"]), tinv.flagRef("grpc-addr")
	case refDeciderHTTP:
		wantPort, via = listenPort(tinv.value["http-addr"]), tinv.flagRef("http-addr")
	case refEngine:
		wantPort, via = listenPort(tinv.value["addr"]), tinv.flagRef("addr")
	case refKafka:
		// The broker must advertise exactly this host:port, or clients are redirected elsewhere.
		if adv, ok := target.Environment["KAFKA_ADVERTISED_LISTENERS"]; ok && adv != nil &&
			!strings.Contains(*adv, "//"+net.JoinHostPort(hp.host, hp.port)) {
			c.addf(name, "%s: %q does not advertise %s (KAFKA_ADVERTISED_LISTENERS=%s)", what, hp.host, net.JoinHostPort(hp.host, hp.port), *adv)
		}
		return
	default:
		return
	}
	if hp.port != wantPort {
		c.addf(name, "%s: port %q, but %q listens on %q (%s)", what, hp.port, hp.host, wantPort, via)
	}
}

// mountedFile returns the host file bind-mounted at container path p, or "".
func mountedFile(s types.ServiceConfig, p string) string {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if v.Target == p {
			return v.Source
		}
		if rel, err := filepath.Rel(v.Target, p); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.Join(v.Source, rel)
		}
	}
	return ""
}

// checkConfigFiles: each configuration file a sluice command reads is mounted from the
// repository, parses and validates, and its engines are the compose simengines, with the same
// id, model, role, port and bootstrap port.
func (c *checker) checkConfigFiles() {
	covered := map[string]bool{} // simengine services some worker points at
	docs := 0
	var cacheAware bool
	for _, name := range sortedKeys(c.invs) {
		inv := c.invs[name]
		flag, ok := configFlags[inv.key]
		if !ok || inv.value[flag] == "" {
			continue
		}
		file := inv.value[flag]
		src := mountedFile(c.p.Services[name], file)
		if src == "" {
			c.addf(name, "%s = %q is not bind-mounted from the repository (the image's copy is examples/sluice.yaml, whose engines are not compose services)", inv.flagRef(flag), file)
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			c.addf(name, "%s: mounted file: %v", inv.flagRef(flag), err)
			continue
		}
		rel, _ := filepath.Rel(c.root, src)
		doc, err := config.Parse(data, config.FormatAuto)
		if err == nil {
			err = doc.Validate()
		}
		if err != nil {
			c.addf(name, "%s: %s does not parse and validate: %v", inv.flagRef(flag), rel, err)
			continue
		}
		docs++
		cacheAware = cacheAware || usesPolicy(doc, config.PolicyCacheAware)
		for _, w := range doc.Engines {
			c.checkEngine(name, rel, w, covered)
		}
	}
	if docs == 0 {
		return
	}
	for _, name := range sortedKeys(c.invs) {
		inv := c.invs[name]
		if inv.command == "simengine" && !covered[name] {
			c.addf(name, "simengine -id %q is the engine of no worker in the applied configuration; no decider routes to it", inv.value["id"])
		}
		if inv.command == "decider" && cacheAware && inv.value["kafka-brokers"] == "" {
			c.addf(name, "the configuration uses cache_aware, which needs KV events: set -kafka-brokers")
		}
	}
}

func (c *checker) checkEngine(name, rel string, w config.EngineSpec, covered map[string]bool) {
	where := fmt.Sprintf("%s worker %q", rel, w.ID)
	u, err := url.Parse(w.URL)
	if err != nil {
		c.addf(name, "%s: url %q: %v", where, w.URL, err)
		return
	}
	host := u.Hostname()
	if _, ok := c.p.Services[host]; !ok {
		c.addf(name, "%s: url %q: host %q is not a compose service (services: %s)", where, w.URL, host, strings.Join(sortedKeys(c.p.Services), ", "))
		return
	}
	e := c.invs[host]
	if e == nil || e.command != "simengine" {
		return // a real engine defined some other way; nothing more to compare
	}
	covered[host] = true
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if want := listenPort(e.value["addr"]); port != want {
		c.addf(name, "%s: url %q: port %s, but %q listens on %s (%s)", where, w.URL, port, host, want, e.flagRef("addr"))
	}
	if e.value["id"] != w.ID {
		c.addf(name, "%s: url names %q, whose %s is %q; Kafka load reports and KV events are keyed by that id, so they would not reach this worker",
			where, host, e.flagRef("id"), e.value["id"])
	}
	if !slices.Contains(w.Models, e.value["model"]) {
		c.addf(name, "%s: models %v, but %q serves %q (%s)", where, w.Models, host, e.value["model"], e.flagRef("model"))
	}
	if e.value["role"] != w.Role {
		c.addf(name, "%s: role %q, but %q runs %s = %q", where, w.Role, host, e.flagRef("role"), e.value["role"])
	}
	if w.Role == config.RolePrefill && strconv.FormatUint(uint64(w.BootstrapPort), 10) != e.value["bootstrap-port"] {
		c.addf(name, "%s: bootstrap_port %d, but %q listens for bootstrap on %s (%s)", where, w.BootstrapPort, host, e.value["bootstrap-port"], e.flagRef("bootstrap-port"))
	}
}

func usesPolicy(d *config.Document, typ string) bool {
	var stages []*config.StagePolicies
	stages = append(stages, d.DefaultPolicy)
	for _, m := range d.Models {
		stages = append(stages, m.DefaultPolicy)
	}
	for _, sp := range stages {
		for _, st := range []string{config.StagePlain, config.StagePrefill, config.StageDecode} {
			if p := sp.For(st); p != nil && p.Type == typ {
				return true
			}
		}
	}
	for _, b := range d.Buckets {
		groups := []*config.GroupSpec{b.Groups.Plain}
		if b.Groups.PD != nil {
			groups = append(groups, b.Groups.PD.Prefill, b.Groups.PD.Decode)
		}
		for _, g := range groups {
			if g != nil && g.Policy != nil && g.Policy.Type == typ {
				return true
			}
		}
	}
	return false
}

// checkTopics: deciders consume the topics simengines publish to, and a topic-creating job, if
// there is one, creates them.
func (c *checker) checkTopics() {
	topicFlags := []string{"load-topic", "kv-topic"}
	consumed := map[string]string{} // topic → decider service
	for _, name := range sortedKeys(c.invs) {
		if inv := c.invs[name]; inv.command == "decider" && inv.value["kafka-brokers"] != "" {
			for _, f := range topicFlags {
				consumed[inv.value[f]] = name
			}
		}
	}
	if len(consumed) == 0 {
		return
	}
	for _, name := range sortedKeys(c.invs) {
		inv := c.invs[name]
		if inv.command != "simengine" || inv.value["kafka-brokers"] == "" {
			continue
		}
		for _, f := range topicFlags {
			if _, ok := consumed[inv.value[f]]; !ok {
				c.addf(name, "%s = %q: no decider consumes that topic (they read %s)", inv.flagRef(f), inv.value[f], strings.Join(sortedKeys(consumed), ", "))
			}
		}
	}
	for _, name := range sortedKeys(c.p.Services) {
		if c.sluice[name] {
			continue
		}
		s := c.p.Services[name]
		script := strings.Join(append(slices.Clone([]string(s.Entrypoint)), s.Command...), " ")
		if !strings.Contains(script, "kafka-topics") || !strings.Contains(script, "--create") {
			continue
		}
		for _, topic := range sortedKeys(consumed) {
			if !strings.Contains(script, topic) {
				c.addf(name, "creates Kafka topics but not %q, which %q consumes", topic, consumed[topic])
			}
		}
	}
}
