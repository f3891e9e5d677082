package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sluiceCLI describes the sluice binary as its own help output does: the subcommands, the ctl
// verbs, and each command's flags with their types, defaults and environment variables. Nothing
// here is hard-coded from the Go sources, so the checks follow the binary as it changes.
type sluiceCLI struct {
	path     string
	commands map[string]bool // top-level subcommands: decider, gateway, …
	ctlVerbs map[string]bool // ctl apply, ctl get, …

	mu    sync.Mutex
	specs map[string]*cmdSpec // by key: "decider", "ctl apply", …
}

// cmdSpec is one command's flag set as `sluice <key> -help` prints it.
type cmdSpec struct {
	key   string
	flags map[string]*flagSpec
	env   map[string]*flagSpec // environment variable → the flag it backs
	help  string
}

// flagSpec is one flag line of the flag package's PrintDefaults output:
//
//	-name type
//	    	usage (env SLUICE_NAME) (default value)
type flagSpec struct {
	name  string
	typ   string // "" for a bool flag (it takes no value argument)
	usage string
	def   string // the printed default, unquoted; "" when none is printed
	env   string // the "(env NAME)" the usage documents; "" when none
}

func (f *flagSpec) isBool() bool { return f.typ == "" }

var (
	flagHeader  = regexp.MustCompile(`^  -(\S+?)(?: (\S+))?(?:\t(.*))?$`)
	envNote     = regexp.MustCompile(`\(env ([A-Z][A-Z0-9_]*)\)`)
	defaultNote = regexp.MustCompile(`\(default (.+)\)\s*$`)
	commandLine = regexp.MustCompile(`^  ([a-z][a-z0-9-]*)\s`)
)

func newSluiceCLI(path string) (*sluiceCLI, error) {
	c := &sluiceCLI{path: path, specs: map[string]*cmdSpec{}}
	top, err := c.run("help")
	if err != nil {
		return nil, err
	}
	if c.commands = listedCommands(top); len(c.commands) == 0 {
		return nil, fmt.Errorf("`sluice help` lists no commands:\n%s", top)
	}
	if c.commands["ctl"] {
		out, err := c.run("ctl", "help")
		if err != nil {
			return nil, err
		}
		if c.ctlVerbs = listedCommands(out); len(c.ctlVerbs) == 0 {
			return nil, fmt.Errorf("`sluice ctl help` lists no commands:\n%s", out)
		}
	}
	return c, nil
}

// run executes the binary with a clean environment (no SLUICE_* or DATABASE_URL from the test's
// own environment) and returns its combined output. Help exits 0 or, for some commands, 2;
// only a failure to start is an error.
func (c *sluiceCLI) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.path, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return "", fmt.Errorf("sluice %s: still running after 30s (did it start a server instead of printing help?)", strings.Join(args, " "))
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", fmt.Errorf("sluice %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// listedCommands reads the "commands:" block of a usage text.
func listedCommands(usage string) map[string]bool {
	out := map[string]bool{}
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.TrimSpace(line) == "commands:":
			in = true
		case in && strings.TrimSpace(line) == "":
			if len(out) > 0 {
				return out
			}
		case in:
			if m := commandLine.FindStringSubmatch(line); m != nil {
				out[m[1]] = true
			}
		}
	}
	return out
}

// spec returns the flags of `sluice <key>` (key is "decider" or "ctl apply"), from -help.
func (c *sluiceCLI) spec(key string) (*cmdSpec, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.specs[key]; ok {
		return s, nil
	}
	args := append(strings.Fields(key), "-help")
	out, err := c.run(args...)
	if err != nil {
		return nil, err
	}
	s := parseHelp(key, out)
	if len(s.flags) == 0 {
		return nil, fmt.Errorf("`sluice %s -help` printed no flags:\n%s", key, out)
	}
	c.specs[key] = s
	return s, nil
}

func parseHelp(key, out string) *cmdSpec {
	s := &cmdSpec{key: key, flags: map[string]*flagSpec{}, env: map[string]*flagSpec{}, help: out}
	var cur *flagSpec
	finish := func() {
		if cur == nil {
			return
		}
		cur.usage = strings.TrimSpace(cur.usage)
		if m := envNote.FindStringSubmatch(cur.usage); m != nil {
			cur.env = m[1]
			s.env[m[1]] = cur
		}
		if m := defaultNote.FindStringSubmatch(cur.usage); m != nil {
			cur.def = m[1]
			if u, err := strconv.Unquote(m[1]); err == nil {
				cur.def = u
			}
		}
		s.flags[cur.name] = cur
		cur = nil
	}
	for _, line := range strings.Split(out, "\n") {
		if m := flagHeader.FindStringSubmatch(line); m != nil {
			finish()
			cur = &flagSpec{name: m[1], typ: m[2], usage: m[3]}
			continue
		}
		if cur != nil && strings.HasPrefix(line, "    \t") {
			cur.usage += " " + strings.TrimPrefix(line, "    \t")
			continue
		}
		finish()
	}
	finish()
	return s
}

func (s *cmdSpec) flagNames() string {
	names := make([]string, 0, len(s.flags))
	for n := range s.flags {
		names = append(names, "-"+n)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// checkValue reports whether v parses as a value of the flag package type typ (as -help names
// it). Types it does not know (string, value, back-quoted names) accept anything.
func checkValue(typ, v string) error {
	var err error
	switch typ {
	case "":
		_, err = strconv.ParseBool(v)
	case "duration":
		_, err = time.ParseDuration(v)
	case "int":
		_, err = strconv.ParseInt(v, 0, 64)
	case "uint":
		_, err = strconv.ParseUint(v, 0, 64)
	case "float":
		_, err = strconv.ParseFloat(v, 64)
	}
	if err != nil {
		kind := typ
		if kind == "" {
			kind = "bool"
		}
		return fmt.Errorf("not a valid %s", kind)
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
