package flagenv

import (
	"flag"
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Setenv("SLUICE_GRPC_ADDR", ":9999")
	t.Setenv("SLUICE_LEASE_TTL", "3m")
	t.Setenv("SLUICE_GIVEN", "from-env")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	addr := fs.String("grpc-addr", ":7070", "")
	ttl := fs.Duration("lease-ttl", time.Minute, "")
	given := fs.String("given", "", "")
	untouched := fs.Int("untouched", 4, "")
	if err := Parse(fs, "SLUICE_", []string{"-given", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if *addr != ":9999" || *ttl != 3*time.Minute || *given != "from-flag" || *untouched != 4 {
		t.Errorf("got addr=%q ttl=%v given=%q untouched=%d", *addr, *ttl, *given, *untouched)
	}
}

func TestParseBadEnv(t *testing.T) {
	t.Setenv("SLUICE_LEASE_TTL", "soon")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("lease-ttl", time.Minute, "")
	err := Parse(fs, "SLUICE_", nil)
	if err == nil {
		t.Fatal("Parse accepted a malformed duration")
	}
	if got := err.Error(); got[:len("environment SLUICE_LEASE_TTL (flag -lease-ttl)")] != "environment SLUICE_LEASE_TTL (flag -lease-ttl)" {
		t.Errorf("error %q does not name the variable and flag", got)
	}
}

func TestList(t *testing.T) {
	for in, want := range map[string][]string{
		"": nil, " , ,": nil, "a": {"a"}, " a:1 ,b:2,, c ": {"a:1", "b:2", "c"},
	} {
		if got := List(in); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", in, got, want)
		}
	}
}
