package config

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestResolved(t *testing.T) {
	defaults := CacheAwareSettings{
		MinMatchTokens: 1024, CandidateMin: 8, CandidateRatio: 0.05, CandidateMax: 32, SwitchMarginTokens: 1024,
		PressureGuard: true, GuardAbsoluteTokens: 8192, GuardFactor: 1.5, MissChoices: 2,
	}
	tests := []struct {
		name string
		in   PolicySpec
		want ResolvedPolicy
	}{
		{name: "power_of_two", in: PolicySpec{Type: PolicyPowerOfTwo}, want: ResolvedPolicy{Type: PolicyPowerOfTwo}},
		{name: "admission", in: PolicySpec{Type: PolicyRandom, Admission: &AdmissionSpec{MaxKVTokens: ptr[int64](5), MaxInflightRequests: ptr[int64](7)}},
			want: ResolvedPolicy{Type: PolicyRandom, Admission: AdmissionLimits{MaxKVTokens: 5, MaxInflightRequests: 7}}},
		{name: "cache_aware defaults", in: PolicySpec{Type: PolicyCacheAware}, want: ResolvedPolicy{Type: PolicyCacheAware, CacheAware: defaults}},
		{name: "cache_aware set", in: PolicySpec{
			Type: PolicyCacheAware, MinMatchTokens: ptr[int64](0), MinMatchRatio: ptr(0.5), CandidateMin: ptr[int64](1),
			CandidateRatio: ptr(0.0), CandidateMax: ptr[int64](3), SwitchMarginTokens: ptr[int64](0), PressureGuard: ptr(false),
			GuardAbsoluteTokens: ptr[int64](10), GuardAbsoluteMillis: ptr[int64](20), GuardFactor: ptr(3.0),
			QueueLimit: ptr[int64](4), SaturationFloor: ptr[int64](2), MissChoices: ptr[int64](5),
		}, want: ResolvedPolicy{Type: PolicyCacheAware, CacheAware: CacheAwareSettings{
			MinMatchTokens: 0, MinMatchRatio: 0.5, CandidateMin: 1, CandidateRatio: 0, CandidateMax: 3, SwitchMarginTokens: 0,
			PressureGuard: false, GuardAbsoluteTokens: 10, GuardAbsoluteMillis: 20, GuardFactor: 3, QueueLimit: 4, SaturationFloor: 2, MissChoices: 5,
		}}},
		{name: "ttft_aware defaults", in: PolicySpec{Type: PolicyTTFTAware}, want: ResolvedPolicy{Type: PolicyTTFTAware,
			TTFTAware: TTFTAwareSettings{DefaultPrefillTokensPerSec: 10000, TypicalRequestTokens: 2048, HotSpotMarginMillis: 250}}},
		{name: "ttft_aware set", in: PolicySpec{Type: PolicyTTFTAware, DefaultPrefillTokensPerSec: ptr[int64](5000),
			TypicalRequestTokens: ptr[int64](100), HotSpotMarginMillis: ptr[int64](0)}, want: ResolvedPolicy{Type: PolicyTTFTAware,
			TTFTAware: TTFTAwareSettings{DefaultPrefillTokensPerSec: 5000, TypicalRequestTokens: 100, HotSpotMarginMillis: 0}}},
		{name: "session_aware", in: PolicySpec{Type: PolicySessionAware}, want: ResolvedPolicy{Type: PolicySessionAware, IdleTimeout: 600 * time.Second}},
		{name: "sticky defaults", in: PolicySpec{Type: PolicySticky}, want: ResolvedPolicy{Type: PolicySticky, IdleTimeout: 600 * time.Second, Fallback: PolicyRoundRobin}},
		{name: "sticky set", in: PolicySpec{Type: PolicySticky, IdleTimeout: &Duration{time.Minute}, Fallback: ptr(PolicyLoadBased)},
			want: ResolvedPolicy{Type: PolicySticky, IdleTimeout: time.Minute, Fallback: PolicyLoadBased}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.in.Resolved()); diff != "" {
				t.Errorf("Resolved() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyFor(t *testing.T) {
	p := func(typ string) *PolicySpec { return &PolicySpec{Type: typ} }
	d := &Document{
		DefaultPolicy: &StagePolicies{Plain: p(PolicyRoundRobin), Decode: p(PolicyLoadBased)},
		Models: map[string]ModelSpec{
			"m": {DefaultPolicy: &StagePolicies{Plain: p(PolicySticky), Prefill: p(PolicyCacheAware)}},
		},
	}
	tests := []struct {
		name         string
		doc          *Document
		model, stage string
		group        *GroupSpec
		want         string
	}{
		{"group policy wins", d, "m", StagePlain, &GroupSpec{Policy: p(PolicyRandom)}, PolicyRandom},
		{"model default", d, "m", StagePlain, &GroupSpec{}, PolicySticky},
		{"model default, nil group", d, "m", StagePrefill, nil, PolicyCacheAware},
		{"document default when model lacks the stage", d, "m", StageDecode, nil, PolicyLoadBased},
		{"document default for other models", d, "other", StagePlain, nil, PolicyRoundRobin},
		{"built-in default", d, "other", StagePrefill, nil, PolicyPowerOfTwo},
		{"nil document", nil, "m", StageDecode, nil, PolicyPowerOfTwo},
		{"empty document", &Document{}, "m", StagePlain, nil, PolicyPowerOfTwo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.doc.PolicyFor(tt.model, tt.stage, tt.group).Type; got != tt.want {
				t.Errorf("PolicyFor(%q, %q) = %q, want %q", tt.model, tt.stage, got, tt.want)
			}
		})
	}
	// The result is a copy: changing it does not change the document.
	g := &GroupSpec{Policy: &PolicySpec{Type: PolicyCacheAware, QueueLimit: ptr[int64](3)}}
	got := d.PolicyFor("m", StagePrefill, g)
	*got.QueueLimit = 99
	if *g.Policy.QueueLimit != 3 {
		t.Errorf("PolicyFor returned memory shared with the group")
	}
}

func TestDefaultPolicy(t *testing.T) {
	for _, stage := range []string{StagePlain, StagePrefill, StageDecode} {
		if diff := cmp.Diff(PolicySpec{Type: PolicyPowerOfTwo}, DefaultPolicy(stage)); diff != "" {
			t.Errorf("DefaultPolicy(%q) mismatch (-want +got):\n%s", stage, diff)
		}
	}
}

func TestDefaultBuckets(t *testing.T) {
	want := []BucketSpec{
		{ID: "plain", Rank: 0, Groups: GroupsSpec{Plain: &GroupSpec{}}},
		{ID: "pd", Rank: 1, Groups: GroupsSpec{PD: &PDSpec{Prefill: &GroupSpec{}, Decode: &GroupSpec{}}}},
	}
	if diff := cmp.Diff(want, DefaultBuckets()); diff != "" {
		t.Errorf("DefaultBuckets() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, (&Document{}).EffectiveBuckets()); diff != "" {
		t.Errorf("EffectiveBuckets() of empty document mismatch (-want +got):\n%s", diff)
	}
	if err := (&Document{Buckets: DefaultBuckets()}).Validate(); err != nil {
		t.Errorf("default buckets are invalid: %v", err)
	}
	d := validDoc()
	if diff := cmp.Diff(d.Buckets, d.EffectiveBuckets()); diff != "" {
		t.Errorf("EffectiveBuckets() mismatch (-want +got):\n%s", diff)
	}
}

func TestClone(t *testing.T) {
	d := mustParse(t, readTestdata(t, "full.yaml"), FormatYAML)
	c := d.Clone()
	if diff := cmp.Diff(d, c); diff != "" {
		t.Fatalf("Clone() mismatch (-want +got):\n%s", diff)
	}
	// Mutate every reachable part of the clone; the original must not move.
	before, _ := Marshal(d, FormatJSON)
	c.Engines[0].Models[0] = "x"
	c.Engines[0].Labels["zone"] = "x"
	c.Buckets[0].Models[0] = "x"
	*c.Buckets[0].Limits.Max = 1
	*c.Buckets[0].MaxContextTokens = 1
	(*c.Buckets[0].Groups.PD.Prefill.EngineIDs)[0] = "x"
	c.Buckets[0].Groups.PD.Decode.Policy.Type = "x"
	*c.DefaultPolicy.Prefill.Admission.MaxKVTokens = 1
	*c.DefaultPolicy.Prefill.MinMatchRatio = 1
	c.Models["llama"].DefaultPolicy.Plain.IdleTimeout.Duration = 1
	after, _ := Marshal(d, FormatJSON)
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Errorf("mutating the clone changed the original (-before +after):\n%s", diff)
	}
	if (*Document)(nil).Clone() != nil {
		t.Errorf("nil Clone() != nil")
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{600 * time.Second, "600s"},
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Hour + 500*time.Millisecond, "1h0m0.5s"},
	}
	for _, tt := range tests {
		b, err := json.Marshal(Duration{tt.d})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(b), `"`+tt.want+`"`; got != want {
			t.Errorf("json.Marshal(%v) = %s, want %s", tt.d, got, want)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || back.Duration != tt.d {
			t.Errorf("json.Unmarshal(%s) = %v, %v; want %v", b, back, err, tt.d)
		}
	}
	var d Duration
	if err := d.UnmarshalText([]byte("ten minutes")); err == nil {
		t.Errorf("UnmarshalText(bad) succeeded")
	}
}
