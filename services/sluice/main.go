// Command sluice is the one binary of sluice: each subcommand runs one process. The main only
// parses flags (with SLUICE_* environment fallbacks), builds a logger and runs the service
// package under a signal-cancelled context.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/internal/flagenv"
	"github.com/sluicehq/sluice/internal/serve"
	"github.com/sluicehq/sluice/services/ctl"
	"github.com/sluicehq/sluice/services/deciderserver"
	"github.com/sluicehq/sluice/services/devstack"
	"github.com/sluicehq/sluice/services/enginelink"
	"github.com/sluicehq/sluice/services/gateway"
	"github.com/sluicehq/sluice/services/simengine"
	"github.com/sluicehq/sluice/services/simulate"
)

const envPrefix = "SLUICE_"

// stdout receives command output (replaced in tests).
var stdout io.Writer = os.Stdout

var commands = []struct {
	name, summary string
	run           func(ctx context.Context, args []string, stderr io.Writer) error
}{
	{"dev", "run the whole stack in one process on embedded defaults (Kafka, decider, gateway, simulated engines)", runDev},
	{"decider", "run the decider: Decide/Release over gRPC, Connect and REST", runDecider},
	{"ctl", "operate a decider: apply/validate/diff configuration, get, versions, rollback", runCtl},
	{"replay", "replay a Kafka topic into a fresh KV index or load table and print what it built", runReplay},
	{"gateway", "run the HTTP gateway: OpenAI/SGLang routes decided by a decider, plus its REST API", runGateway},
	{"simengine", "run a simulated inference engine (OpenAI/SGLang HTTP API, Kafka load and KV events)", runSimengine},
	{"simulate", "replay a trace through the real decider against simulated engines in virtual time and compare policies", runSimulate},
	{"enginelink", "connect real vLLM/SGLang engines: ZMQ KV events and /metrics load to Kafka", runEnginelink},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return errors.New("missing command")
		}
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery flag of the long-running commands can also be set by environment: -grpc-addr is\nSLUICE_GRPC_ADDR. ctl reads SLUICE_SERVER and SLUICE_TOKEN.")
}

// logFlags are shared by every long-running command.
type logFlags struct {
	level  string
	format string
}

// register binds the log flags; the values already in l are the defaults.
func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", l.level, "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", l.format, "log format: json or text")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: use debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.format) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format %q: use json or text", l.format)
}

func parse(fs *flag.FlagSet, args []string) error {
	flagenv.Usage(fs, envPrefix)
	if err := flagenv.Parse(fs, envPrefix, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// The flag package stops at the first non-flag; anything after it would be ignored.
		return fmt.Errorf("%s: unexpected argument %q (flags must come before it; see -help)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// runner is what every long-running command builds and runs.
type runner interface {
	Run(ctx context.Context) error
}

// runnerFunc adapts a function to runner.
type runnerFunc func(ctx context.Context) error

func (f runnerFunc) Run(ctx context.Context) error { return f(ctx) }

// runService parses the command's flags (registered by register, plus the log flags starting at
// logDefaults) with environment fallbacks, builds the logger, then the service, and runs it.
func runService(ctx context.Context, name string, args []string, stderr io.Writer, logDefaults logFlags,
	register func(*flag.FlagSet), build func(*slog.Logger) (runner, error)) error {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	register(fs)
	lf := logDefaults
	lf.register(fs)
	var pprofAddr string
	fs.StringVar(&pprofAddr, serve.PprofFlag, "", "serve net/http/pprof on this address (:6060 = loopback only; name a host to expose it); empty = off")
	if err := parse(fs, args); err != nil {
		return err
	}
	logger, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	if _, err := serve.PprofAddr(pprofAddr); err != nil {
		return err
	}
	srv, err := build(logger)
	if err != nil {
		return err
	}
	prof, err := serve.StartPprof(pprofAddr, logger)
	if err != nil {
		return err
	}
	defer prof.Close()
	return srv.Run(ctx)
}

var serviceLogDefaults = logFlags{level: "info", format: "json"}

func runDecider(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := deciderserver.DefaultConfig()
	return runService(ctx, "decider", args, stderr, serviceLogDefaults, cfg.RegisterFlags, func(l *slog.Logger) (runner, error) {
		cfg.FillFromEnvironment()
		return nilSafe(deciderserver.New(l, cfg))
	})
}

func runGateway(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := gateway.DefaultConfig()
	dcfg := deciderserver.DefaultConfig()
	var embed bool
	register := func(fs *flag.FlagSet) {
		cfg.RegisterFlags(fs)
		fs.BoolVar(&embed, "embed-decider", false, "run a decider in this process, configured by the -decider.* flags; Decide and Release "+
			"then stay in process (-decider-addr is ignored: the embedded decider's own -decider.grpc-addr serves the rest and other gateways)")
		sub := flag.NewFlagSet("decider", flag.ContinueOnError)
		dcfg.RegisterFlags(sub)
		sub.VisitAll(func(f *flag.Flag) {
			fs.Var(f.Value, embeddedDeciderPrefix+f.Name, "with -embed-decider: the decider's -"+f.Name+": "+f.Usage)
		})
	}
	return runService(ctx, "gateway", args, stderr, serviceLogDefaults, register, func(l *slog.Logger) (runner, error) {
		if !embed {
			return nilSafe(gateway.New(l, cfg))
		}
		dcfg.FillFromEnvironment()
		dec, err := deciderserver.New(l.With(slog.String("component", "decider")), dcfg)
		if err != nil {
			return nil, fmt.Errorf("embedded decider: %w", err)
		}
		cfg.DeciderAddr = dec.GRPCAddr()
		gw, err := gateway.New(l, cfg, gateway.WithLocalDecider(dec.LocalConn()))
		if err != nil {
			return nil, err
		}
		return runnerFunc(func(ctx context.Context) error { return runEmbedded(ctx, gw, dec) }), nil
	})
}

// embeddedDeciderPrefix prefixes the decider's flags on `sluice gateway -embed-decider`.
const embeddedDeciderPrefix = "decider."

// runEmbedded runs a gateway and the decider it embeds: the decider keeps serving until the
// gateway has drained (its last leases released), and a decider that fails stops the gateway.
func runEmbedded(ctx context.Context, gw *gateway.Server, dec *deciderserver.Server) error {
	gctx, stopGateway := context.WithCancel(ctx)
	defer stopGateway()
	dctx, stopDecider := context.WithCancel(context.WithoutCancel(ctx))
	defer stopDecider()
	derr := make(chan error, 1)
	go func() {
		err := dec.Run(dctx)
		stopGateway()
		derr <- err
	}()
	gerr := gw.Run(gctx)
	stopDecider()
	if err := <-derr; err != nil {
		return errors.Join(gerr, fmt.Errorf("embedded decider: %w", err))
	}
	return gerr
}

func runSimengine(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := simengine.DefaultConfig()
	return runService(ctx, "simengine", args, stderr, serviceLogDefaults, cfg.RegisterFlags, func(l *slog.Logger) (runner, error) {
		return nilSafe(simengine.New(l, cfg))
	})
}

func runEnginelink(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := enginelink.DefaultConfig()
	return runService(ctx, "enginelink", args, stderr, serviceLogDefaults, cfg.RegisterFlags, func(l *slog.Logger) (runner, error) {
		return nilSafe(enginelink.New(l, cfg))
	})
}

func runSimulate(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := simulate.DefaultConfig()
	return runService(ctx, "simulate", args, stderr, logFlags{level: "info", format: "text"}, cfg.RegisterFlags, func(l *slog.Logger) (runner, error) {
		return runnerFunc(func(ctx context.Context) error { return simulate.Run(ctx, l, cfg, stdout) }), nil
	})
}

// nilSafe turns a constructor's (*T, error) into (runner, error) without a typed-nil runner.
func nilSafe[T runner](srv T, err error) (runner, error) {
	if err != nil {
		return nil, err
	}
	return srv, nil
}

// runCtl exits with ctl's own exit code (2 usage, 3 invalid, 4 conflict), which scripts rely on.
func runCtl(ctx context.Context, args []string, stderr io.Writer) error {
	if code := ctl.Run(ctx, args, os.Stdout, stderr); code != ctl.ExitOK {
		os.Exit(code)
	}
	return nil
}

func runDev(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := devstack.DefaultConfig()
	register := func(fs *flag.FlagSet) {
		fs.StringVar(&cfg.GatewayAddr, "gateway-addr", cfg.GatewayAddr, "gateway listen address (OpenAI routes and REST)")
		fs.StringVar(&cfg.DeciderGRPCAddr, "grpc-addr", cfg.DeciderGRPCAddr, "decider gRPC listen address")
		fs.StringVar(&cfg.DeciderHTTPAddr, "http-addr", cfg.DeciderHTTPAddr, "decider HTTP listen address (Connect, REST, metrics)")
		fs.StringVar(&cfg.LinkAddr, "link-addr", cfg.LinkAddr, "enginelink HTTP listen address (/metrics)")
		fs.IntVar(&cfg.PlainEngines, "plain-engines", cfg.PlainEngines, "simulated plain engines (model sim-chat)")
		fs.IntVar(&cfg.PDPairs, "pd-pairs", cfg.PDPairs, "simulated prefill + decode pairs (model sim-pd)")
		fs.Float64Var(&cfg.Speed, "speed", cfg.Speed, "simulated engine speed factor (10 = ten times faster than the latency model)")
		fs.StringVar(&cfg.ConfigPath, "config", cfg.ConfigPath, "bucket configuration to use instead of the generated one (dev serves a copy in -data-dir; the file is never written)")
		fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "keep the configuration dev serves (and admin writes change), its versions and snapshots here (default: a temporary directory)")
		fs.StringVar(&cfg.AdminToken, "admin-token", cfg.AdminToken, "the decider's admin bearer token (default: a random one, printed)")
		fs.BoolVar(&cfg.DecisionHeaders, "decision-headers", cfg.DecisionHeaders, "gateway answers carry X-Sluice-Engine/-Bucket/-Reason/-Matched-Tokens headers")
	}
	return runService(ctx, "dev", args, stderr, logFlags{level: "warn", format: "text"}, register, func(l *slog.Logger) (runner, error) {
		return runnerFunc(func(ctx context.Context) error { return devstack.Run(ctx, l, cfg, stdout) }), nil
	})
}
