package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	docs := map[string]*Document{
		"empty":   {},
		"nil":     nil,
		"valid":   validDoc(),
		"example": mustParse(t, readTestdata(t, "policy_design_example.yaml"), FormatYAML),
		"full":    mustParse(t, readTestdata(t, "full.yaml"), FormatYAML),
		"defaults": {Buckets: DefaultBuckets(), DefaultPolicy: &StagePolicies{},
			Models: map[string]ModelSpec{"m": {}, "n": {DefaultPolicy: &StagePolicies{}}}},
	}
	for name, doc := range docs {
		for _, f := range []Format{FormatYAML, FormatJSON} {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				t.Parallel()
				b, err := Marshal(doc, f)
				if err != nil {
					t.Fatal(err)
				}
				got := mustParse(t, b, FormatAuto)
				want := doc
				if want == nil {
					want = &Document{}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Parse(Marshal(doc)) mismatch (-want +got):\n%s\n%s", diff, b)
				}
				again, err := Marshal(got, f)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(string(b), string(again)); diff != "" {
					t.Errorf("Marshal is not deterministic (-first +second):\n%s", diff)
				}
			})
		}
	}
}

func TestMarshalUnknownFormat(t *testing.T) {
	t.Parallel()
	if _, err := Marshal(&Document{}, Format(7)); err == nil {
		t.Errorf("Marshal(unknown format) succeeded")
	}
}

// TestMarshalRoundTripStrings checks strings that YAML would read as other
// types, or that need quoting, survive both encodings.
func TestMarshalRoundTripStrings(t *testing.T) {
	t.Parallel()
	tricky := []string{"yes", "no", "on", "1", "~", "null", "  x ", ".inf", "0x10", "1_000", "2001-12-14",
		"1e3", "true", "- a", "a: b", "#c", "tab\there", "nl\nx", `"q"`, "'s'", "ü", "*a", "&a", "!tag", "<<",
		"%x", "@x", "`x", "{x}", "[x]", "0o17", "+1", "-0", ".5", "1:2", "=", "\x00", "\u2028", "a\r\nb"}
	for _, s := range tricky {
		d := &Document{
			// Engine ids follow the id rule (letters, digits, . _ -), so the tricky
			// string travels in the model ids and labels only.
			Engines: []EngineSpec{{ID: "w", URL: "http://x", Models: []string{s + "m"}, Role: RolePlain, Labels: map[string]string{s: s}}},
			Buckets: []BucketSpec{{ID: "b", Models: []string{s + "m"}, Groups: GroupsSpec{Plain: &GroupSpec{EngineIDs: ids("w")}}}},
			Models:  map[string]ModelSpec{s + "m": {DefaultPolicy: &StagePolicies{Plain: &PolicySpec{Type: PolicySticky, Fallback: ptr("random")}}}},
		}
		for _, f := range []Format{FormatYAML, FormatJSON} {
			b, err := Marshal(d, f)
			if err != nil {
				t.Fatalf("Marshal(%q, %v): %v", s, f, err)
			}
			got, err := Parse(b, f)
			if err != nil {
				t.Errorf("Parse(Marshal(%q, %v)): %v\n%s", s, f, err, b)
				continue
			}
			if diff := cmp.Diff(d, got); diff != "" {
				t.Errorf("round trip of %q as %v mismatch (-want +got):\n%s", s, f, diff)
			}
		}
	}
}
