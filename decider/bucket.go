package decider

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// Unbounded is the limit value meaning "no upper bound".
const Unbounded = math.MaxInt64

// Limits are a bucket's length constraints. Input bounds are inclusive.
type Limits struct {
	// MinInput and MaxInput bound the input length; MaxInput is Unbounded when open.
	MinInput int64
	MaxInput int64
	// MaxContext bounds input plus the output budget when known (input alone otherwise);
	// Unbounded when open.
	MaxContext int64
}

// Capacity is the lesser of the input upper bound and the context capacity; Unbounded sorts last.
func (l Limits) Capacity() int64 { return min(l.MaxInput, l.MaxContext) }

func (l Limits) validate() error {
	switch {
	case l.MinInput < 0:
		return fmt.Errorf("min input %d is negative", l.MinInput)
	case l.MaxInput < l.MinInput:
		return fmt.Errorf("max input %d is below min input %d", l.MaxInput, l.MinInput)
	case l.MaxContext < 1:
		return fmt.Errorf("max context %d must be at least 1", l.MaxContext)
	}
	return nil
}

// fits reports whether a request of input tokens, with a known peak when hasPeak, fits.
func (l Limits) fits(input, peak int64, hasPeak bool) bool {
	if input < l.MinInput || input > l.MaxInput {
		return false
	}
	need := input
	if hasPeak {
		need = peak
	}
	return need <= l.MaxContext
}

// Bucket is a length class with either one plain engine group or a complete prefill + decode
// pair. The two shapes are distinct constructors; a bucket with a missing PD half or with both
// shapes cannot be built.
type Bucket struct {
	id     string
	rank   int64
	limits Limits
	plain  *EngineGroup // set for a plain bucket
	pd     *pdGroups    // set for a PD bucket
}

type pdGroups struct {
	prefill *EngineGroup
	decode  *EngineGroup
}

// NewPlainBucket returns a plain bucket served by one group of plain engines.
func NewPlainBucket(id string, rank int64, limits Limits, plain *EngineGroup) (*Bucket, error) {
	if err := checkBucket(id, limits); err != nil {
		return nil, err
	}
	if plain == nil || plain.role != registry.RolePlain {
		return nil, fmt.Errorf("bucket %q: a plain bucket needs a plain engine group", id)
	}
	return &Bucket{id: id, rank: rank, limits: limits, plain: plain}, nil
}

// NewPDBucket returns a prefill/decode bucket; both groups are required and both picks of one
// request come from this bucket.
func NewPDBucket(id string, rank int64, limits Limits, prefill, decode *EngineGroup) (*Bucket, error) {
	if err := checkBucket(id, limits); err != nil {
		return nil, err
	}
	if prefill == nil || prefill.role != registry.RolePrefill || decode == nil || decode.role != registry.RoleDecode {
		return nil, fmt.Errorf("bucket %q: a PD bucket needs a prefill group and a decode group", id)
	}
	return &Bucket{id: id, rank: rank, limits: limits, pd: &pdGroups{prefill: prefill, decode: decode}}, nil
}

func checkBucket(id string, l Limits) error {
	if id == "" {
		return errors.New("bucket id is empty")
	}
	if err := l.validate(); err != nil {
		return fmt.Errorf("bucket %q: %w", id, err)
	}
	return nil
}

// ID is the bucket's configured id.
func (b *Bucket) ID() string { return b.id }

// Rank breaks capacity ties (lower first).
func (b *Bucket) Rank() int64 { return b.rank }

// Limits returns the bucket's length constraints.
func (b *Bucket) Limits() Limits { return b.limits }

// IsPD reports whether the bucket selects a prefill + decode pair.
func (b *Bucket) IsPD() bool { return b.pd != nil }

// stageTracer creates per-stage traces for explain output; nil when not explaining.
type stageTracer interface {
	stage(role registry.Role, g *EngineGroup, reg *registry.Snapshot, model string) *policy.Trace
	done(t *policy.Trace, pick policy.Pick, err error)
}

// pickEngines asks the bucket's groups for a complete selection for req, among engines that
// declare adapter unless it is "": a Decision with BucketID and the plain pick, or PD set and
// the prefill and decode picks. A failure carries the stage it happened in (a *StageError). For
// PD, a decode failure discards the tentative prefill pick.
func (b *Bucket) pickEngines(ctx context.Context, reg *registry.Snapshot, req *policy.Request, adapter string, tr stageTracer) (Decision, error) {
	if b.plain != nil {
		p, err := b.pickStage(ctx, reg, req, adapter, b.plain, tr)
		if err != nil {
			return Decision{}, err
		}
		return Decision{BucketID: b.id, Plain: p}, nil
	}
	pre, err := b.pickStage(ctx, reg, req, adapter, b.pd.prefill, tr)
	if err != nil {
		return Decision{}, err
	}
	dec, err := b.pickStage(ctx, reg, req, adapter, b.pd.decode, tr)
	if err != nil {
		return Decision{}, err
	}
	return Decision{BucketID: b.id, PD: true, Prefill: pre, Decode: dec}, nil
}

// pickStage runs group g's pick on a copy of req carrying this attempt's fields.
func (b *Bucket) pickStage(ctx context.Context, reg *registry.Snapshot, req *policy.Request, adapter string, g *EngineGroup, tr stageTracer) (policy.Pick, error) {
	pr := *req
	pr.Stage, pr.BucketID, pr.Trace = g.role, b.id, nil
	if tr != nil {
		pr.Trace = tr.stage(g.role, g, reg, req.Model)
	}
	p, err := g.pick(ctx, reg, pr, adapter)
	if tr != nil {
		tr.done(pr.Trace, p, err)
	}
	if err != nil {
		return policy.Pick{}, &StageError{Bucket: b.id, Stage: g.role, Err: err}
	}
	return p, nil
}

// StageError is a failed group pick, retaining the bucket and stage it happened in.
type StageError struct {
	Bucket string
	Stage  registry.Role
	Err    error
}

func (e *StageError) Error() string {
	return fmt.Sprintf("bucket %q %s stage: %v", e.Bucket, e.Stage, e.Err)
}

func (e *StageError) Unwrap() error { return e.Err }
