// Package ctl is `sluice ctl`, the operator's command line for the decider's AdminService:
// apply, validate and diff configuration files, list buckets, engines and versions, roll back.
// It talks Connect (default) or gRPC to the decider's HTTP port.
//
// Exit codes are part of the interface, for scripts: 0 success, 1 any other error (network,
// server, authentication), 2 usage error, 3 the configuration is invalid, 4 version conflict
// (someone else changed the configuration first; re-run against the current version).
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicehq/sluice/gen/sluice/v1/sluicev1connect"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitInvalid  = 3
	ExitConflict = 4
	// ExitDiffers is diff's answer when the file differs from the configuration in force, so
	// scripts can tell "changes pending" (5) from "no changes" (0) and from errors.
	ExitDiffers = 5
)

// errDiffers is diff's result when differences were printed.
var errDiffers = errors.New("differences found")

// Environment variables read for --server and --token.
const (
	EnvServer = "SLUICE_SERVER"
	EnvToken  = "SLUICE_TOKEN"
)

// DefaultServer is the decider's default HTTP address.
const DefaultServer = "http://localhost:7080"

type command struct {
	name, args, summary string
	run                 func(ctx context.Context, c *cli, args []string) error
}

var commands = []command{
	{"apply", "-f FILE [--based-on N]", "store FILE (YAML or JSON) as the next configuration version", runApply},
	{"validate", "-f FILE", "check FILE against the server; store nothing", runValidate},
	{"diff", "-f FILE", "show how FILE differs from the configuration in force", runDiff},
	{"get", "buckets|engines|shards|config", "list the buckets, engines or model shards in force, or print the configuration (apply -f takes it back)", runGet},
	{"versions", "[--limit N]", "list configuration versions, newest first", runVersions},
	{"rollback", "N [--based-on M]", "make version N's configuration current again", runRollback},
}

// cli holds the global flags and the streams.
type cli struct {
	server, token, output string
	useGRPC               bool
	timeout               time.Duration
	stdout, stderr        io.Writer
	// Subcommand flags.
	file    string
	basedOn int64
	limit   int
}

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// Run executes `sluice ctl` with args (after "ctl") and returns the exit code. Flags may come
// before the command (`sluice ctl -server URL get buckets`), between and after its arguments.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("sluice ctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	fs.Usage = c.usage
	// Global flags before the command: Parse stops at the first argument that is not a flag.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	args = fs.Args()
	if len(args) == 0 || args[0] == "help" {
		c.usage()
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == args[0] {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "sluice ctl: unknown command %q\n", args[0])
		c.usage()
		return ExitUsage
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice ctl %s %s [flags]\n\n%s\n\nflags:\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	switch c.output {
	case "", "human", "json", "yaml":
	default:
		fmt.Fprintf(stderr, "sluice ctl: -o %q: use json or yaml (or leave unset for tables)\n", c.output)
		return ExitUsage
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	return c.exit(cmd.run(ctx, c, pos))
}

func (c *cli) register(fs *flag.FlagSet) {
	server := os.Getenv(EnvServer)
	if server == "" {
		server = DefaultServer
	}
	fs.StringVar(&c.server, "server", server, "decider HTTP address (env "+EnvServer+")")
	fs.StringVar(&c.token, "token", os.Getenv(EnvToken), "bearer token (env "+EnvToken+"); never printed")
	fs.StringVar(&c.output, "o", "", "output format: json or yaml (default: human-readable)")
	fs.BoolVar(&c.useGRPC, "grpc", false, "use the gRPC protocol instead of Connect")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of the whole command")
	fs.StringVar(&c.file, "f", "", "configuration file (YAML or JSON; - for stdin)")
	fs.Int64Var(&c.basedOn, "based-on", 0, "version the change is based on (default: the version in force)")
	fs.IntVar(&c.limit, "limit", 20, "most versions to list (0: all)")
}

// parseInterspersed parses flags appearing before, between and after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func (c *cli) usage() {
	fmt.Fprintln(c.stderr, "usage: sluice ctl <command> [args] [flags]\n\ncommands:")
	for _, cmd := range commands {
		fmt.Fprintf(c.stderr, "  %-9s %-22s %s\n", cmd.name, cmd.args, cmd.summary)
	}
	fmt.Fprintln(c.stderr, "\nflags (before or after the command): --server URL ($SLUICE_SERVER), --token T ($SLUICE_TOKEN), -o json|yaml, --grpc, --timeout D")
	fmt.Fprintln(c.stderr, "exit codes: 0 ok, 1 error, 2 usage, 3 invalid configuration, 4 version conflict, 5 diff found differences")
}

func (c *cli) client() sluicev1connect.AdminServiceClient {
	server := c.server
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	httpClient := http.DefaultClient
	var opts []connect.ClientOption
	if c.useGRPC {
		var protocols http.Protocols
		protocols.SetUnencryptedHTTP2(true)
		protocols.SetHTTP2(true)
		httpClient = &http.Client{Transport: &http.Transport{Protocols: &protocols}}
		opts = append(opts, connect.WithGRPC())
	}
	if c.token != "" {
		token := c.token
		opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+token)
				return next(ctx, req)
			}
		})))
	}
	return sluicev1connect.NewAdminServiceClient(httpClient, strings.TrimRight(server, "/"), opts...)
}

// exit prints err (with every validation problem) and maps it to an exit code.
func (c *cli) exit(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errDiffers) {
		return ExitDiffers
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(c.stderr, "sluice ctl:", ue.msg)
		return ExitUsage
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		fmt.Fprintln(c.stderr, "sluice ctl:", err)
		var ve *localInvalid
		if errors.As(err, &ve) {
			return ExitInvalid
		}
		return ExitError
	}
	var problems []*errdetails.BadRequest_FieldViolation
	reason := ""
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		switch m := v.(type) {
		case *errdetails.BadRequest:
			problems = append(problems, m.GetFieldViolations()...)
		case *errdetails.ErrorInfo:
			reason = m.GetReason()
		}
	}
	switch {
	case ce.Code() == connect.CodeInvalidArgument && len(problems) > 0:
		fmt.Fprintf(c.stderr, "configuration is invalid (%s):\n", plural(len(problems), "problem"))
		for _, p := range problems {
			fmt.Fprintf(c.stderr, "  %s: %s\n", p.GetField(), p.GetDescription())
		}
		return ExitInvalid
	case ce.Code() == connect.CodeFailedPrecondition && reason == "CONFIG_VERSION_CONFLICT":
		fmt.Fprintln(c.stderr, "sluice ctl: conflict:", ce.Message())
		return ExitConflict
	}
	fmt.Fprintf(c.stderr, "sluice ctl: %s: %s\n", strings.ReplaceAll(ce.Code().String(), "_", " "), ce.Message())
	return ExitError
}

// plural is "1 problem", "2 problems".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
