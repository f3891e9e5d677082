package admission

import (
	"testing"

	"github.com/sluicehq/sluice/state/loadtable"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	native := loadtable.View{Running: 10, Waiting: 4, KVUsedTokens: 1000, KVCapacityTokens: 4000,
		Native: true, WaitingUncachedTokens: 512, MaxRunningRequests: 64}
	basic := loadtable.View{Running: 10, Waiting: 4, KVUsedTokens: 1000, KVCapacityTokens: 4000}
	tests := []struct {
		name   string
		limits Limits
		m      Metrics
		want   string
	}{
		{"zero limits admit everything", Limits{}, Metrics{View: native, Known: true, InFlight: 1 << 40}, ""},
		{"running at cap rejects", Limits{MaxRunningRequests: 10}, Metrics{View: native, Known: true}, LimitRunningRequests},
		{"running one below cap admits", Limits{MaxRunningRequests: 11}, Metrics{View: native, Known: true}, ""},
		{"waiting at cap rejects", Limits{MaxWaitingRequests: 4}, Metrics{View: native, Known: true}, LimitWaitingRequests},
		{"waiting one below cap admits", Limits{MaxWaitingRequests: 5}, Metrics{View: native, Known: true}, ""},
		{"kv at cap rejects", Limits{MaxKVTokens: 1000}, Metrics{View: native, Known: true}, LimitKVTokens},
		{"kv one below cap admits", Limits{MaxKVTokens: 1001}, Metrics{View: native, Known: true}, ""},
		{"pending prefill at cap rejects", Limits{MaxPendingPrefillTokens: 512}, Metrics{View: native, Known: true}, LimitPendingPrefillTokens},
		{"pending prefill one below admits", Limits{MaxPendingPrefillTokens: 513}, Metrics{View: native, Known: true}, ""},
		{"pending prefill unknown on basic view fails open", Limits{MaxPendingPrefillTokens: 1}, Metrics{View: basic, Known: true}, ""},
		{"inflight at cap rejects", Limits{MaxInflightRequests: 3}, Metrics{InFlight: 3}, LimitInflightRequests},
		{"inflight one below cap admits", Limits{MaxInflightRequests: 3}, Metrics{InFlight: 2}, ""},
		{"unknown load fails open on reported caps", Limits{MaxRunningRequests: 1, MaxWaitingRequests: 1, MaxKVTokens: 1, MaxPendingPrefillTokens: 1}, Metrics{Known: false}, ""},
		{"unknown load still checks inflight", Limits{MaxRunningRequests: 1, MaxInflightRequests: 1}, Metrics{Known: false, InFlight: 1}, LimitInflightRequests},
		{"first violated cap in field order", Limits{MaxRunningRequests: 1, MaxWaitingRequests: 1, MaxInflightRequests: 1}, Metrics{View: native, Known: true, InFlight: 5}, LimitRunningRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.limits.Check(tt.m); got != tt.want {
				t.Errorf("Check() = %q, want %q", got, tt.want)
			}
		})
	}
}
