package config

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const shardsDoc = `
shards:
  - {id: a, models: [chat, code], deciders: ["10.0.0.1:7070", "10.0.0.2:7070"]}
  - {id: b, models: [embed]}
`

func TestShardsParseAndRoundTrip(t *testing.T) {
	t.Parallel()
	doc, err := Parse([]byte(shardsDoc), FormatAuto)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []ShardSpec{{ID: "a", Models: []string{"chat", "code"}, Deciders: []string{"10.0.0.1:7070", "10.0.0.2:7070"}},
		{ID: "b", Models: []string{"embed"}}}
	if diff := cmp.Diff(want, doc.Shards); diff != "" {
		t.Fatalf("Shards mismatch (-want +got):\n%s", diff)
	}
	if s, ok := doc.ShardOf("code"); !ok || s.ID != "a" {
		t.Errorf("ShardOf(code) = %v, %v; want shard a", s.ID, ok)
	}
	if _, ok := doc.ShardOf("other"); ok {
		t.Error("ShardOf(other) found a shard; no shard lists it")
	}
	if doc.IsEmpty() {
		t.Error("IsEmpty() = true for a document with only shards")
	}
	for _, f := range []Format{FormatJSON, FormatYAML} {
		out, err := Marshal(doc, f)
		if err != nil {
			t.Fatalf("Marshal(%v): %v", f, err)
		}
		back, err := Parse(out, f)
		if err != nil {
			t.Fatalf("Parse(Marshal(%v)): %v\n%s", f, err, out)
		}
		if diff := cmp.Diff(doc.Shards, back.Shards); diff != "" {
			t.Errorf("round trip through %v changed shards (-want +got):\n%s", f, diff)
		}
	}
	c := doc.Clone()
	c.Shards[0].Models[0] = "changed"
	if doc.Shards[0].Models[0] != "chat" {
		t.Error("Clone shares the shards' model slices with the original")
	}
	if got := Summarize(&Document{}, doc); got != "shards changed" {
		t.Errorf("summary = %q, want %q", got, "shards changed")
	}
	if ShardTopic("kv", "") != "kv" || ShardTopic("kv", "a") != "kv.a" {
		t.Errorf("ShardTopic: got %q and %q", ShardTopic("kv", ""), ShardTopic("kv", "a"))
	}
}

func TestShardsProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		want     []Problem
	}{
		{"empty list", `shards: []`, []Problem{{"shards", "empty list; omit the key to run unsharded deciders (line 1)"}}},
		{"bad id", `shards: [{id: "a.b", models: [m]}]`, []Problem{{"shards[0].id", `"a.b": want 1-64 letters, digits, '-' or '_' (it becomes a Kafka topic suffix) (line 1)`}}},
		{"duplicate id", "shards:\n  - {id: a, models: [m]}\n  - {id: a, models: [n]}\n",
			[]Problem{{"shards[1].id", `duplicate shard id "a" (also shards[0]); give each shard its own id (line 3)`}}},
		{"no models", `shards: [{id: a}]`, []Problem{{"shards[0].models", "required: list the model ids this shard owns (line 1)"}}},
		{"model twice", "shards:\n  - {id: a, models: [m]}\n  - {id: b, models: [m]}\n",
			[]Problem{{"shards[1].models[0]", `model "m" already belongs to shard "a"; a model belongs to at most one shard (line 3)`}}},
		{"bad address", `shards: [{id: a, models: [m], deciders: [nohost]}]`,
			[]Problem{{"shards[0].deciders[0]", `"nohost": want the host:port of a decider's gRPC listener (line 1)`}}},
		{"unknown key", `shards: [{id: a, models: [m], partitions: 3}]`,
			[]Problem{{"shards[0].partitions", "unknown key; valid keys here are id, models, deciders (line 1)"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in), FormatAuto)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse(%q) error = %v, want a ValidationError", tt.in, err)
			}
			if diff := cmp.Diff(tt.want, ve.Problems); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
