package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse feeds arbitrary input to Parse. It must never panic, and a
// document it accepts must survive Marshal and Parse unchanged, in both
// formats.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"*.yaml", "*.json"} {
		files, _ := filepath.Glob(filepath.Join("testdata", pattern))
		for _, name := range files {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"buckets":[{"id":"a","groups":{"plain":{"worker_ids":[]}}}]}`))
	f.Add([]byte("default_policy: {plain: {type: sticky, idle_timeout: 1.5s, fallback: random}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse(data, FormatAuto)
		if err != nil {
			return
		}
		if err := doc.Validate(); err != nil {
			t.Fatalf("Parse accepted a document that Validate rejects: %v", err)
		}
		for _, format := range []Format{FormatYAML, FormatJSON} {
			out, err := Marshal(doc, format)
			if err != nil {
				t.Fatalf("Marshal(%v): %v", format, err)
			}
			back, err := Parse(out, format)
			if err != nil {
				t.Fatalf("Parse(Marshal(%v)) failed: %v\n%s", format, err, out)
			}
			if diff := cmp.Diff(doc, back); diff != "" {
				t.Fatalf("Parse(Marshal(%v)) mismatch (-want +got):\n%s\n%s", format, diff, out)
			}
		}
	})
}
