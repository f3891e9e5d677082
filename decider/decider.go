// Package decider selects the engine, or the prefill + decode pair, that serves a request:
// bucket-first selection as described in docs/decisions.md. A bucket resolver orders a model's
// buckets by length; each bucket asks its engine groups for a complete selection; each
// engine group filters live engines and runs its policy. The Decider owns the bucket loop, the
// configuration snapshot and leases; transports (services/) translate to and from protobuf.
package decider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/inflight"
	"github.com/sluicehq/sluice/state/registry"
)

// Config holds the decider's optional settings.
type Config struct {
	// MaxTokenIDs caps len(token_ids) in a request; longer requests are refused. Default 2,097,152.
	MaxTokenIDs int
}

// validate applies defaults and checks ranges.
func (c *Config) validate() error {
	if c.MaxTokenIDs == 0 {
		c.MaxTokenIDs = 2 << 20
	}
	if c.MaxTokenIDs < 0 {
		return fmt.Errorf("decider: max token ids %d is negative; use a positive cap", c.MaxTokenIDs)
	}
	return nil
}

// Decision is a complete selection: one plain engine, or a prefill + decode pair from the same
// bucket, plus the lease holding their in-flight accounting.
type Decision struct {
	BucketID      string
	ConfigVersion int64
	PD            bool
	// Plain is set for a plain bucket; Prefill and Decode for a PD bucket (PD set).
	Plain   policy.Pick
	Prefill policy.Pick
	Decode  policy.Pick
	// Lease is zero for dry runs.
	Lease   inflight.Lease
	Explain *Explain
}

// Decider routes requests over the current configuration snapshot. It is safe for concurrent use.
type Decider struct {
	logger *slog.Logger
	reg    *registry.Registry
	deps   policy.Deps
	leases *inflight.Tracker
	cfg    Config
	rt     atomic.Pointer[runtime]
}

// runtime is one configuration version: resolvers are built per model on first use, because
// engines (and so models) can appear between configuration versions.
type runtime struct {
	version int64
	doc     *config.Document
	models  sync.Map        // model -> *bucketResolver
	ttft    *ttftPreference // nil when ttft_slo is off
}

// New returns a Decider. It routes nothing until Apply installs a configuration.
func New(logger *slog.Logger, reg *registry.Registry, deps policy.Deps, leases *inflight.Tracker, cfg Config) (*Decider, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Decider{logger: logger, reg: reg, deps: deps, leases: leases, cfg: cfg}, nil
}

// Apply installs a configuration snapshot after checking that every bucket and policy in it can
// be built. Decide calls in flight finish on the snapshot they started with; later calls see the
// new one — never a mix.
func (d *Decider) Apply(snap config.Snapshot) error {
	if snap.Document == nil {
		return errors.New("decider: configuration snapshot has no document")
	}
	if err := d.Check(snap.Document); err != nil {
		return fmt.Errorf("decider: configuration version %d: %w", snap.Version, err)
	}
	rt := &runtime{version: snap.Version, doc: snap.Document, ttft: newTTFTPreference(snap.Document, d.deps)}
	for _, m := range d.reg.Snapshot().Models() {
		r, err := d.buildResolver(snap.Document, m, false)
		if err != nil {
			return fmt.Errorf("decider: configuration version %d: %w", snap.Version, err)
		}
		rt.models.Store(m, r)
	}
	d.rt.Store(rt)
	d.logger.Info("configuration applied", slog.Int64("config_version", snap.Version), slog.String("source", snap.Source))
	return nil
}

// Check builds every bucket, group and policy of doc without installing it, so a document this
// decider cannot serve (an unsupported policy type, an incomplete bucket) is refused before any
// state changes.
func (d *Decider) Check(doc *config.Document) error {
	if doc == nil {
		return errors.New("configuration has no document")
	}
	_, err := d.buildResolver(doc, "", true)
	return err
}

// ConfigVersion is the version of the installed configuration, 0 before Apply.
func (d *Decider) ConfigVersion() int64 {
	if rt := d.rt.Load(); rt != nil {
		return rt.version
	}
	return 0
}

// Now reads the decider's clock: its load table's, which its leases share. A caller that
// times a Decide passes the reading to DecideAt, so the call reads the clock once.
func (d *Decider) Now() time.Time { return d.deps.Load.Now() }

// Release frees a lease's in-flight accounting and returns the ids of the engines it held. It
// reports false for an unknown, expired or already released lease; releasing twice never
// double-counts.
func (d *Decider) Release(leaseID string) ([]string, bool) {
	l, ok := d.leases.Release(leaseID)
	if !ok {
		return nil, false
	}
	ids := make([]string, 0, len(l.Slots))
	for _, w := range d.reg.Snapshot().Engines() {
		if slices.Contains(l.Slots, w.Slot) {
			ids = append(ids, w.ID)
		}
	}
	return ids, true
}

func (rt *runtime) resolver(d *Decider, model string) (*bucketResolver, error) {
	if r, ok := rt.models.Load(model); ok {
		return r.(*bucketResolver), nil
	}
	r, err := d.buildResolver(rt.doc, model, false)
	if err != nil {
		return nil, err
	}
	actual, _ := rt.models.LoadOrStore(model, r)
	return actual.(*bucketResolver), nil
}

// Decide runs the bucket loop: it resolves the buckets the request fits and asks each, in
// order (capacity order; with a TTFT target and ttft_slo enabled, the buckets predicted to meet
// it first, see ttftslo.go), for a complete selection. No candidates or an admission rejection
// moves to the next bucket (all picks repeated there); an invalid signal, configuration or
// foreign pick stops with KindInternal. Exhaustion returns KindUnavailable with every admission
// rejection met, or the last stage that had no candidates; but KindInvalidArgument
// (NO_MATCHING_BUCKET) when no fitting bucket can serve the model and another bucket can
// (reach.go). Unless DryRun, a lease is acquired on the selected engines.
//
// The request's attempt fields (Stage, BucketID, Prefix, Trace) are the decider's to set.
func (d *Decider) Decide(ctx context.Context, req policy.Request) (Decision, error) {
	return d.DecideAt(ctx, time.Time{}, req)
}

// DecideAt is Decide at now, a reading of the decider's clock (Now) the caller already took:
// every load snapshot of the call is judged at it and the lease starts at it. A zero now makes
// each pick and the lease read the clock, as Decide does.
func (d *Decider) DecideAt(ctx context.Context, now time.Time, req policy.Request) (Decision, error) {
	req.NowNanos = 0
	if !now.IsZero() {
		req.NowNanos = now.UnixNano()
	}
	rt := d.rt.Load()
	if rt == nil {
		return Decision{}, &Error{Kind: KindUnavailable, Reason: reasonInvalidConfiguration, Message: "no configuration loaded yet"}
	}
	if err := d.validate(&req); err != nil {
		return Decision{}, err
	}
	if req.HasTTFTTarget && rt.ttft != nil {
		if err := rt.ttft.checkTarget(req.TTFTTargetMillis); err != nil {
			return Decision{}, err
		}
	}
	reg := d.reg.Snapshot()
	ar, aerr := resolveAdapter(reg, &req)
	if aerr != nil {
		return Decision{}, aerr
	}
	req.Model, req.LoRAName = ar.model, ar.lora
	adapter := "" // when set, only engines declaring this adapter are candidates
	if ar.require {
		adapter = ar.lora
	}
	res, err := rt.resolver(d, req.Model)
	if err != nil {
		return Decision{}, internal(reasonInvalidConfiguration, err)
	}
	req.Prefix = nil
	if len(req.TokenIDs) > 0 {
		// One prefix lookup per call, shared by every bucket and group that asks for it.
		req.Prefix = &policy.PrefixMemo{}
	}
	var ex *explainer
	var tr stageTracer
	if req.Explain {
		ex = &explainer{}
		tr = ex
	}
	// The fitting buckets in the order they are tried; on the stack for up to 16.
	var fitBuf [16]*bucket
	buckets := fitBuf[:0]
	for b := range res.resolve(req.InputTokens, req.ExpectedPeakTokens, req.HasPeak) {
		buckets = append(buckets, b)
	}
	if req.HasTTFTTarget {
		if rt.ttft == nil {
			ex.ttftDisabled(req.TTFTTargetMillis)
		} else {
			rt.ttft.reorder(ctx, reg, &req, buckets, adapter, ex)
		}
	}
	var (
		rejections []Rejection
		lastEmpty  registry.Role
	)
	matched := len(buckets) > 0
	for _, b := range buckets {
		ex.begin(b)
		dec, err := b.pickEngines(ctx, reg, &req, adapter, tr)
		if err == nil {
			ex.end("picked")
			dec.ConfigVersion = rt.version
			if !req.DryRun {
				if dec.Lease, err = d.acquire(&dec, now); err != nil {
					return Decision{}, err
				}
			}
			dec.Explain = ex.result()
			return dec, nil
		}
		var se *stageError
		if !errors.As(err, &se) {
			return Decision{}, internal(reasonInvalidConfiguration, err)
		}
		var rj *policy.RejectedError
		switch {
		case errors.Is(err, policy.ErrNoCandidates):
			ex.end("no_candidates")
			// Prefer the last empty stage whose role the model has engines for: with the
			// default buckets a plain model also fails the pd bucket, which says nothing.
			if lastEmpty == 0 || serves(reg, req.Model, se.stage) || !serves(reg, req.Model, lastEmpty) {
				lastEmpty = se.stage
			}
		case errors.As(err, &rj):
			ex.end("admission_rejected")
			for _, r := range rj.Rejections {
				rejections = append(rejections, Rejection{BucketID: b.id, Role: se.stage, EngineID: r.EngineID, Limit: r.Limit})
			}
		case ctx.Err() != nil:
			return Decision{}, ctx.Err()
		case errors.Is(err, errOutsideCandidates):
			return Decision{}, internal(reasonOutsideCandidates, err)
		case errors.Is(err, policy.ErrInvalidSignal):
			return Decision{}, internal(reasonInvalidSignal, err)
		default:
			return Decision{}, internal(reasonInvalidConfiguration, err)
		}
	}
	if !matched {
		return Decision{}, d.noMatchingBucket(reg, &req, res)
	}
	var e *Error
	if len(rejections) == 0 {
		e = d.tooLong(reg, &req, res)
	}
	switch {
	case e != nil:
	case len(rejections) > 0:
		e = &Error{Kind: KindUnavailable, Reason: reasonAdmissionRejected, Message: "every compatible bucket refused admission", Rejections: rejections}
	default:
		e = noCandidates(reg, req.Model, lastEmpty)
	}
	if ex != nil {
		// The explanation rides on the error for callers that log it.
		e.Err = &ExplainedError{Explain: ex.result()}
	}
	return Decision{}, e
}

// acquire takes the lease of dec at now, or at a fresh clock reading when now is zero.
func (d *Decider) acquire(dec *Decision, now time.Time) (inflight.Lease, error) {
	if now.IsZero() {
		now = d.leases.Now()
	}
	var l inflight.Lease
	var err error
	if dec.PD {
		l, err = d.leases.AcquireAt(now, dec.Prefill.Engine.Slot, dec.Decode.Engine.Slot)
	} else {
		l, err = d.leases.AcquireAt(now, dec.Plain.Engine.Slot)
	}
	if err != nil {
		return inflight.Lease{}, &Error{Kind: KindUnavailable, Reason: reasonAdmissionRejected, Message: "lease table full: " + err.Error(), Err: err}
	}
	return l, nil
}

func (d *Decider) validate(req *policy.Request) error {
	switch {
	case req.Model == "":
		return invalidArgument(reasonEmptyModel, "model is empty; name the model the request is for")
	case len(req.TokenIDs) > d.cfg.MaxTokenIDs:
		return invalidArgument(reasonTooManyTokenIDs, "token_ids has %d entries, above the cap of %d; omit token_ids or raise --max-token-ids", len(req.TokenIDs), d.cfg.MaxTokenIDs)
	case len(req.TokenIDs) > 0 && int64(len(req.TokenIDs)) != req.InputTokens:
		return invalidArgument(reasonTokenIDsMismatch, "token_ids has %d entries but input_tokens is %d; they must describe the same prompt", len(req.TokenIDs), req.InputTokens)
	}
	return checkSignal(req.InputTokens, req.ExpectedPeakTokens, req.HasPeak)
}

func checkSignal(input, peak int64, hasPeak bool) error {
	if input < 0 {
		return invalidArgument(reasonInvalidInputTokens, "input_tokens %d is negative; send the prompt length in tokens", input)
	}
	if hasPeak && peak < input {
		return invalidArgument(reasonPeakBelowInput, "expected_peak_tokens %d is below input_tokens %d; send input plus the output budget, or omit it", peak, input)
	}
	return nil
}

func unknownModel(model string, known []string) *Error {
	list := known
	if len(list) > 10 {
		list = list[:10]
	}
	hint := "no engine is registered"
	if len(list) > 0 {
		hint = "known models: " + strings.Join(list, ", ")
	}
	return invalidArgument(reasonUnknownModel, "no engine serves model %q (%s)", model, hint)
}

// serves reports whether any registered engine, healthy or not, serves model in role.
func serves(reg *registry.Snapshot, model string, role registry.Role) bool {
	return len(reg.Candidates(model, role)) > 0 || reg.UnhealthyCount(model, role) > 0
}

func noCandidates(reg *registry.Snapshot, model string, stage registry.Role) *Error {
	if len(reg.Candidates(model, stage)) == 0 && reg.UnhealthyCount(model, stage) > 0 {
		return &Error{Kind: KindUnavailable, Reason: reasonNoHealthyEngines, Stage: stage,
			Message: fmt.Sprintf("no healthy %s engine for model %q", stage, model)}
	}
	reason := reasonNoCandidates
	switch stage {
	case registry.RolePrefill:
		reason = reasonNoPrefillCandidates
	case registry.RoleDecode:
		reason = reasonNoDecodeCandidates
	}
	return &Error{Kind: KindUnavailable, Reason: reason, Stage: stage,
		Message: fmt.Sprintf("no %s engine available for model %q in any compatible bucket", stage, model)}
}
