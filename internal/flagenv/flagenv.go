// Package flagenv gives every command-line flag an environment-variable fallback, so the same
// binary is configured by flags on a laptop and by environment in compose or Kubernetes.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName is the variable that backs a flag: prefix + upper-cased name with '-' and '.' as '_'.
// For prefix "SLUICE_" the flag -grpc-addr is read from SLUICE_GRPC_ADDR.
func EnvName(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// Parse parses args into fs, then sets every flag not given on the command line from its
// environment variable when that is set. A malformed environment value is an error naming both
// the variable and the flag.
func Parse(fs *flag.FlagSet, prefix string, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := EnvName(prefix, f.Name)
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment %s (flag -%s): %w", name, f.Name, serr)
			}
		}
	})
	return err
}

// Usage appends the environment fallback to each flag's usage text, so -help documents both.
func Usage(fs *flag.FlagSet, prefix string) {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += fmt.Sprintf(" (env %s)", EnvName(prefix, f.Name))
	})
}

// List splits a comma-separated flag value (brokers, adapters, tokens) into its non-empty,
// space-trimmed items; nil when there are none.
func List(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
