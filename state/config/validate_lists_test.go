package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidateLists covers the rules that engine, bucket and group lists
// share (validate.go: uniqueEntries, uniqueID, isHTTPURL) at each place
// that uses them.
func TestValidateLists(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(d *Document)
		want   []Problem
	}{
		{name: "blank entries", mutate: func(d *Document) {
			d.Buckets[1].Models = []string{" "}
			d.Engines[2].LoRAAdapters = []string{" ", "", "sql", "sql"}
			d.Buckets[0].Groups.PD.Prefill.EngineIDs = ids("", " ")
		}, want: []Problem{
			{"workers[2].lora_adapters[0]", "LoRA adapter id must not be empty"},
			{"workers[2].lora_adapters[1]", "LoRA adapter id must not be empty"},
			{"workers[2].lora_adapters[3]", `duplicate LoRA adapter "sql" (also at index 2); list it once`},
			{"buckets[0].groups.pd.prefill.worker_ids[0]", "worker id must not be empty"},
			{"buckets[0].groups.pd.prefill.worker_ids[1]", `worker " " is not listed in workers; add it there or remove it from this group`},
			{"buckets[1].models[0]", "model id must not be empty"},
		}},
		{name: "group worker ids without an engine list", mutate: func(d *Document) {
			d.Engines = nil
			d.Buckets[0].Groups.PD.Prefill.EngineIDs = ids(" ", "x", "x", "")
		}, want: []Problem{
			{"buckets[0].groups.pd.prefill.worker_ids[2]", `duplicate worker id "x" (also at index 1); list it once`},
			{"buckets[0].groups.pd.prefill.worker_ids[3]", "worker id must not be empty"},
		}},
		{name: "ids", mutate: func(d *Document) {
			d.Engines[1].ID = "P1"
			d.Engines[2].ID = "a/b"
			d.Buckets[1].ID = "short"
			d.Buckets[0].Groups.PD.Decode.EngineIDs = nil
			d.Buckets[1].Groups.Plain.EngineIDs = nil
		}, want: []Problem{
			{"workers[1].id", `duplicate worker id "P1" (also workers[0]); worker ids must be unique`},
			{"workers[2].id", "must use only letters, digits, '.', '_' and '-'"},
			{"buckets[1].id", `duplicate bucket id "short" (also buckets[0]); bucket ids must be unique`},
		}},
		{name: "urls", mutate: func(d *Document) {
			d.Engines[0].URL = "http:///x"
			d.Engines[0].MetricsURL = "ftp://p1/metrics"
			d.Engines[1].MetricsURL = "%zz"
			d.Engines[2].MetricsURL = "https://a1/metrics"
		}, want: []Problem{
			{"workers[0].url", `must be an absolute http or https URL such as "http://10.0.0.5:30000"`},
			{"workers[0].metrics_url", `must be an absolute http or https URL such as "http://10.0.0.5:30000/metrics"`},
			{"workers[1].metrics_url", `must be an absolute http or https URL such as "http://10.0.0.5:30000/metrics"`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := validDoc()
			tt.mutate(d)
			var got []Problem
			if err := d.Validate(); err != nil {
				got = problemsOf(t, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate() problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
