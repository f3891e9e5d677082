package config

import "testing"

func TestSummarize(t *testing.T) {
	t.Parallel()
	withEngines := func(ids ...string) *Document {
		d := &Document{Buckets: []BucketSpec{{ID: "b", Groups: GroupsSpec{Plain: &GroupSpec{}}}}}
		for _, id := range ids {
			d.Engines = append(d.Engines, EngineSpec{ID: id, URL: "http://" + id, Models: []string{"m"}, Role: RolePlain})
		}
		return d
	}
	changed := withEngines("a", "b")
	changed.Engines[1].URL = "http://b2"
	changed.Buckets[0].Rank = 1
	tests := []struct {
		name       string
		prev, next *Document
		want       string
	}{
		{"nil to nil", nil, nil, "no changes"},
		{"nil to engines", nil, withEngines("a"), "buckets: +b -pd -plain; workers: +a"},
		{"engines to nil", withEngines("a"), nil, "buckets: -b +pd +plain; workers: -a"},
		{"changed", withEngines("a", "b", "c"), changed, "buckets: ~b; workers: ~b -c"},
		{"same", withEngines("a"), withEngines("a"), "no changes"},
		{"policy and models", &Document{}, &Document{DefaultPolicy: &StagePolicies{}, Models: map[string]ModelSpec{"m": {}}},
			"default_policy changed; models changed"},
		{"ttft_slo", &Document{}, &Document{TTFTSLO: &TTFTSLOSpec{Enabled: ptr(true)}}, "ttft_slo changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Summarize(tt.prev, tt.next); got != tt.want {
				t.Errorf("Summarize() = %q, want %q", got, tt.want)
			}
		})
	}
}
