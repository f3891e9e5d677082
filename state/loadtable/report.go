package loadtable

import (
	"errors"
	"fmt"
	"time"
)

// maxRanks bounds the data-parallel size a report may advertise, so that one
// malformed record cannot make the table allocate without limit.
const maxRanks = 4096

// Errors returned by Table.Apply. Callers branch on them with errors.Is:
// ErrMalformed and ErrClockSkew are wrapped with details; ErrStaleEpoch and
// ErrDuplicate are returned bare (they are expected in normal operation, e.g.
// on replay, and are meant to be counted, not logged one by one).
var (
	// ErrMalformed marks a report that lacks required fields or has values
	// out of range. The report is not applied.
	ErrMalformed = errors.New("malformed load report")
	// ErrClockSkew marks a report captured further in the future than
	// Config.ClockSkew allows. The report is not applied.
	ErrClockSkew = errors.New("load report captured in the future beyond the allowed clock skew")
	// ErrStaleEpoch marks a report from an older epoch than the engine's
	// current one (a message from before an engine restart). It is ignored.
	ErrStaleEpoch = errors.New("load report from an older engine epoch")
	// ErrDuplicate marks a report whose seq is not above the last applied
	// seq of the same (engine, rank, epoch). It is ignored.
	ErrDuplicate = errors.New("load report seq already applied")
)

// Native is the optional "native" extension of a load report, as engines
// that export their scheduler state provide it. All fields are required
// together and must be >= 0; a report with only part of them must be sent as
// a basic report (Native nil).
type Native struct {
	// WaitingUncachedTokens is the prompt tokens queued for prefill that are
	// not served from the prefix cache.
	WaitingUncachedTokens int64
	// TotalTokens is KV tokens in use plus pending prefill tokens.
	TotalTokens int64
	// MaxRunningRequests is the engine's concurrent request limit.
	MaxRunningRequests int64
	// PrefillUncachedTokensTotal is a cumulative counter of uncached prompt
	// tokens prefilled since the engine (epoch) started.
	PrefillUncachedTokensTotal int64
	// PrefillBusyMicrosTotal is a cumulative counter of microseconds spent
	// prefilling since the engine (epoch) started.
	PrefillBusyMicrosTotal int64
}

// Report is one engine's load for one data-parallel rank, as published on
// the engine-load stream.
type Report struct {
	// EngineID is the reporting engine's id; required.
	EngineID string
	// Rank is the data-parallel rank, 0 <= Rank < Ranks.
	Rank int32
	// Ranks is the engine's advertised data-parallel size. Zero means not
	// advertised: the engine's earlier advertisement in this epoch applies,
	// or else the engine is taken to have the single rank 0.
	Ranks int32
	// Epoch changes when the engine restarts; a newer epoch discards
	// everything known about the engine.
	Epoch uint64
	// Seq increases with each report of the same (engine, rank, epoch).
	Seq uint64
	// CapturedAt is when the engine sampled its state, by its own clock;
	// required (non-zero).
	CapturedAt time.Time
	// Running is the number of requests being decoded; >= 0.
	Running int64
	// Waiting is the number of queued requests; >= 0.
	Waiting int64
	// KVUsedTokens is the KV cache tokens in use; >= 0.
	KVUsedTokens int64
	// KVCapacityTokens is the KV cache capacity in tokens; >= 0.
	KVCapacityTokens int64
	// Native is the native extension, or nil for a basic report.
	Native *Native
}

// validate checks the fields of r that need no table state.
func (r *Report) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: engine %q rank %d: %s", ErrMalformed, r.EngineID, r.Rank, fmt.Sprintf(format, args...))
	}
	switch {
	case r.EngineID == "":
		return bad("engine_id: must be non-empty")
	case r.Rank < 0:
		return bad("rank %d: must be >= 0", r.Rank)
	case r.Ranks < 0 || r.Ranks > maxRanks:
		return bad("ranks %d: must be between 0 (not advertised) and %d", r.Ranks, maxRanks)
	case r.Ranks > 0 && r.Rank >= r.Ranks:
		return bad("rank %d: must be below ranks %d", r.Rank, r.Ranks)
	case r.Rank >= maxRanks:
		return bad("rank %d: must be below %d", r.Rank, maxRanks)
	case r.CapturedAt.IsZero():
		return bad("captured_at: required")
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{
		{"running", r.Running}, {"waiting", r.Waiting},
		{"kv_used_tokens", r.KVUsedTokens}, {"kv_capacity_tokens", r.KVCapacityTokens},
	} {
		if f.v < 0 {
			return bad("%s %d: must be >= 0", f.name, f.v)
		}
	}
	if n := r.Native; n != nil {
		for _, f := range [...]struct {
			name string
			v    int64
		}{
			{"waiting_uncached_tokens", n.WaitingUncachedTokens}, {"total_tokens", n.TotalTokens},
			{"max_running_requests", n.MaxRunningRequests},
			{"prefill_uncached_tokens_total", n.PrefillUncachedTokensTotal},
			{"prefill_busy_micros_total", n.PrefillBusyMicrosTotal},
		} {
			if f.v < 0 {
				return bad("native %s %d: must be >= 0", f.name, f.v)
			}
		}
	}
	return nil
}
