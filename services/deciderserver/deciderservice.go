package deciderserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/components/enginehealth"
	"github.com/sluicehq/sluice/decider"
	"github.com/sluicehq/sluice/decider/policy"
	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/services/deciderserver/console"
	"github.com/sluicehq/sluice/state/registry"
)

var _ sluicev1.DeciderServiceServer = (*deciderService)(nil)

// deciderService is sluice.v1.DeciderService: it translates calls between protobuf and the
// decider package and returns the decider's own errors, which the interceptor chain maps to a
// status (rpc.go). It is the one implementation every protocol reaches.
type deciderService struct {
	sluicev1.UnimplementedDeciderServiceServer
	logger  *slog.Logger
	d       *decider.Decider
	metrics *metrics
	// health receives dispatch outcomes from Release; nil disables breaker reporting.
	health *enginehealth.Tracker
	// console is the web console's decision tail (console.go); nil when it is off.
	console *console.Tail
	// shards refuses models this replica's shard does not own (shard.go).
	shards *shardGate
}

func (s *deciderService) Decide(ctx context.Context, in *sluicev1.DecideRequest) (*sluicev1.DecideResponse, error) {
	if err := s.shards.check(in.GetModel()); err != nil {
		return nil, err
	}
	// One clock reading for the call: its start, and the time its picks and lease use.
	start := s.d.Now()
	req := policy.Request{
		Model:            in.GetModel(),
		InputTokens:      in.GetInputTokens(),
		TokenIDs:         in.GetTokenIds(),
		SessionKey:       in.GetSessionKey(),
		RoutingKey:       in.GetRoutingKey(),
		RequestID:        in.GetRequestId(),
		LoRAName:         in.GetLoraName(),
		CacheSalt:        in.GetCacheSalt(),
		DryRun:           in.GetDryRun(),
		Explain:          in.GetExplain(),
		ExcludeEngineIDs: in.GetExcludeEngineIds(),
	}
	if in.ExpectedPeakTokens != nil {
		req.ExpectedPeakTokens, req.HasPeak = *in.ExpectedPeakTokens, true
	}
	if in.TtftSloMs != nil {
		req.TTFTTargetMillis, req.HasTTFTTarget = *in.TtftSloMs, true
	}
	dec, err := s.d.DecideAt(ctx, start, req)
	took := time.Since(start)
	s.metrics.observeDecide(took, dec.BucketID, err, &dec)
	recordDecision(s.console, &req, &dec, err, start, took)
	if err != nil {
		if s.logger.Enabled(ctx, slog.LevelDebug) {
			s.logger.DebugContext(ctx, "decide failed", slog.String("request_id", req.RequestID), slog.String("model", req.Model), slog.Any("error", err))
		}
		return nil, err
	}
	return decisionToProto(&dec), nil
}

func (s *deciderService) Release(_ context.Context, in *sluicev1.ReleaseRequest) (*sluicev1.ReleaseResponse, error) {
	switch in.GetOutcome() {
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_UNSPECIFIED, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS,
		sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE, sluicev1.ReleaseOutcome_RELEASE_OUTCOME_CANCELLED:
	default:
		return nil, &decider.Error{Kind: decider.KindInvalidArgument, Reason: "INVALID_OUTCOME",
			Message: fmt.Sprintf("outcome %d is not a known ReleaseOutcome; use RELEASE_OUTCOME_SUCCESS, _ENGINE_FAILURE or _CANCELLED", in.GetOutcome())}
	}
	if in.GetLeaseId() == "" {
		return nil, &decider.Error{Kind: decider.KindInvalidArgument, Reason: "EMPTY_LEASE_ID", Message: "lease_id is empty; pass the lease_id Decide returned"}
	}
	engines, released := s.d.Release(in.GetLeaseId())
	if s.health != nil && released {
		s.reportOutcome(in, engines)
	}
	s.metrics.releases.WithLabelValues(outcomeLabel(in.GetOutcome()), strconv.FormatBool(released)).Inc()
	return &sluicev1.ReleaseResponse{Released: released}, nil
}

// reportOutcome feeds dispatch outcomes of a lease that was really released to the engines'
// circuit breakers: the failed engines the caller names (or every engine of the lease when it
// names none) count a failure, but only engines the lease held count, so a caller cannot open a
// breaker of an engine it never dispatched to; a success counts for every engine of the lease.
// An unknown, expired or already released lease changes nothing (release returns before this).
func (s *deciderService) reportOutcome(in *sluicev1.ReleaseRequest, leaseEngines []string) {
	switch in.GetOutcome() {
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS:
		for _, id := range leaseEngines {
			s.health.ReportSuccess(id)
		}
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE:
		failed := leaseEngines
		if named := in.GetFailedEngineIds(); len(named) > 0 {
			failed = slices.DeleteFunc(slices.Clone(leaseEngines), func(id string) bool { return !slices.Contains(named, id) })
		}
		for _, id := range failed {
			s.health.ReportFailure(id)
		}
	}
}

func outcomeLabel(o sluicev1.ReleaseOutcome) string {
	switch o {
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_SUCCESS:
		return "success"
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_ENGINE_FAILURE:
		return "engine_failure"
	case sluicev1.ReleaseOutcome_RELEASE_OUTCOME_CANCELLED:
		return "cancelled"
	}
	return "unspecified"
}

func roleToProto(r registry.Role) sluicev1.Role {
	switch r {
	case registry.RolePlain:
		return sluicev1.Role_ROLE_PLAIN
	case registry.RolePrefill:
		return sluicev1.Role_ROLE_PREFILL
	case registry.RoleDecode:
		return sluicev1.Role_ROLE_DECODE
	}
	return sluicev1.Role_ROLE_UNSPECIFIED
}

// fillPick writes p into out.
func fillPick(out *sluicev1.EnginePick, p policy.Pick) {
	w := p.Engine
	out.EngineId, out.Url, out.Reason, out.BootstrapPort, out.Role = w.ID, w.URL, p.Reason, w.BootstrapPort, roleToProto(w.Role)
}

// plainAnswer and pdAnswer are every message of a Decide response but the explanation,
// allocated at once: one allocation per answer instead of one per nested message (the
// response, its pick, the pick's oneof wrapper, the engine picks, the lease expiry). The
// messages point into the struct and are never copied.
type plainAnswer struct {
	resp    sluicev1.DecideResponse
	pick    sluicev1.BucketPick
	plain   sluicev1.BucketPick_Plain
	engine  sluicev1.EnginePick
	expires timestamppb.Timestamp
}

type pdAnswer struct {
	resp            sluicev1.DecideResponse
	pick            sluicev1.BucketPick
	pd              sluicev1.BucketPick_Pd
	pair            sluicev1.PrefillDecodePick
	prefill, decode sluicev1.EnginePick
	expires         timestamppb.Timestamp
}

func decisionToProto(d *decider.Decision) *sluicev1.DecideResponse {
	var out *sluicev1.DecideResponse
	var expires *timestamppb.Timestamp
	if d.PD {
		a := new(pdAnswer)
		fillPick(&a.prefill, d.Prefill)
		fillPick(&a.decode, d.Decode)
		a.pair.Prefill, a.pair.Decode = &a.prefill, &a.decode
		a.pd.Pd = &a.pair
		a.pick.Kind = &a.pd
		out, expires = &a.resp, &a.expires
		out.Pick = &a.pick
	} else {
		a := new(plainAnswer)
		fillPick(&a.engine, d.Plain)
		a.plain.Plain = &a.engine
		a.pick.Kind = &a.plain
		out, expires = &a.resp, &a.expires
		out.Pick = &a.pick
	}
	out.BucketId, out.ConfigVersion, out.LeaseId = d.BucketID, d.ConfigVersion, d.Lease.ID
	if d.Lease.ID != "" {
		// timestamppb.New's fields, without its allocation.
		expires.Seconds, expires.Nanos = d.Lease.Expires.Unix(), int32(d.Lease.Expires.Nanosecond())
		out.LeaseExpiresAt = expires
	}
	if d.Explain != nil {
		out.Explain = explainToProto(d.Explain)
	}
	return out
}

func explainToProto(e *decider.Explain) *sluicev1.Explain {
	out := &sluicev1.Explain{OldestLoadAge: durationpb.New(e.OldestLoadAge)}
	for _, a := range e.Attempts {
		pa := &sluicev1.BucketAttempt{BucketId: a.BucketID, Outcome: a.Outcome}
		if a.Capacity != decider.Unbounded {
			pa.Capacity = a.Capacity
		}
		for _, s := range a.Stages {
			ps := &sluicev1.StageAttempt{Role: roleToProto(s.Role), Policy: s.Policy, Outcome: s.Outcome,
				PickedEngineId: s.PickedEngineID, Reason: s.Reason, Detail: s.Detail}
			if s.PrefixLookup != 0 {
				ps.PrefixLookup = s.PrefixLookup.String()
			}
			for _, c := range s.Candidates {
				ps.Candidates = append(ps.Candidates, candidateToProto(c))
			}
			pa.Stages = append(pa.Stages, ps)
		}
		out.Attempts = append(out.Attempts, pa)
	}
	if t := e.TTFTSLO; t != nil {
		pt := &sluicev1.TTFTSLOExplain{TargetMs: t.TargetMillis, Status: t.Status}
		for _, b := range t.Buckets {
			pb := &sluicev1.BucketTTFT{BucketId: b.BucketID, Met: b.Met, Note: b.Note}
			if b.Known {
				pb.PredictedTtft = durationpb.New(b.Prediction.TTFT.Estimate)
				pb.EngineId = b.Prediction.Engine.ID
				pb.Estimate = ttftToProto(b.Prediction.TTFT)
			}
			pt.Buckets = append(pt.Buckets, pb)
		}
		out.TtftSlo = pt
	}
	return out
}

func ttftToProto(t policy.TTFTParts) *sluicev1.TTFTEstimate {
	return &sluicev1.TTFTEstimate{Estimate: durationpb.New(t.Estimate), Queue: durationpb.New(t.Queue),
		SlotWait: durationpb.New(t.SlotWait), OwnPrefill: durationpb.New(t.OwnPrefill), QueueTokens: t.QueueTokens,
		QueueFrom: t.QueueFrom, PrefillTokensPerS: t.Rate, PrefillRateDefault: t.RateDefault, BatchFull: t.BatchFull}
}

func candidateToProto(c policy.CandidateNote) *sluicev1.CandidateInfo {
	pc := &sluicev1.CandidateInfo{EngineId: c.EngineID, LoadKnown: c.LoadKnown, InflightRequests: c.InFlight,
		Rejection: c.Rejection, Note: c.Note, MatchedTokens: c.MatchedTokens, UncachedTokens: c.UncachedTokens}
	if c.LoadKnown {
		pc.LoadAge = durationpb.New(c.LoadAge)
		pc.RunningRequests = c.Load.Running
		pc.WaitingRequests = c.Load.Waiting
		pc.KvUsedTokens = c.Load.KVUsedTokens
		pc.KvCapacityTokens = c.Load.KVCapacityTokens
		pc.WaitingUncachedTokens = c.Load.WaitingUncachedTokens
	}
	if c.TTFT != (policy.TTFTParts{}) {
		pc.Ttft = ttftToProto(c.TTFT)
	}
	return pc
}

// explainOf returns the explanation attached to a failed Decide, if any.
func explainOf(err error) *decider.Explain {
	var ee *decider.ExplainedError
	if errors.As(err, &ee) {
		return ee.Explain
	}
	return nil
}
