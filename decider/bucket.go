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

// lengthLimits are a bucket's length constraints. Input bounds are inclusive.
type lengthLimits struct {
	// MinInput and MaxInput bound the input length; MaxInput is Unbounded when open.
	MinInput int64
	MaxInput int64
	// MaxContext bounds input plus the output budget when known (input alone otherwise);
	// Unbounded when open.
	MaxContext int64
}

// capacity is the lesser of the input upper bound and the context capacity; Unbounded sorts last.
func (l lengthLimits) capacity() int64 { return min(l.MaxInput, l.MaxContext) }

func (l lengthLimits) validate() error {
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
func (l lengthLimits) fits(input, peak int64, hasPeak bool) bool {
	if input < l.MinInput || input > l.MaxInput {
		return false
	}
	need := input
	if hasPeak {
		need = peak
	}
	return need <= l.MaxContext
}

// bucket is a length class with either one plain engine group or a complete prefill + decode
// pair. The two shapes are distinct constructors; a bucket with a missing PD half or with both
// shapes cannot be built.
type bucket struct {
	id     string
	rank   int64
	limits lengthLimits
	plain  *engineGroup // set for a plain bucket
	pd     *pdGroups    // set for a PD bucket
}

type pdGroups struct {
	prefill *engineGroup
	decode  *engineGroup
}

// newPlainBucket returns a plain bucket served by one group of plain engines.
func newPlainBucket(id string, rank int64, limits lengthLimits, plain *engineGroup) (*bucket, error) {
	if err := checkBucket(id, limits); err != nil {
		return nil, err
	}
	if plain == nil || plain.role != registry.RolePlain {
		return nil, fmt.Errorf("bucket %q: a plain bucket needs a plain engine group", id)
	}
	return &bucket{id: id, rank: rank, limits: limits, plain: plain}, nil
}

// newPDBucket returns a prefill/decode bucket; both groups are required and both picks of one
// request come from this bucket.
func newPDBucket(id string, rank int64, limits lengthLimits, prefill, decode *engineGroup) (*bucket, error) {
	if err := checkBucket(id, limits); err != nil {
		return nil, err
	}
	if prefill == nil || prefill.role != registry.RolePrefill || decode == nil || decode.role != registry.RoleDecode {
		return nil, fmt.Errorf("bucket %q: a PD bucket needs a prefill group and a decode group", id)
	}
	return &bucket{id: id, rank: rank, limits: limits, pd: &pdGroups{prefill: prefill, decode: decode}}, nil
}

func checkBucket(id string, l lengthLimits) error {
	if id == "" {
		return errors.New("bucket id is empty")
	}
	if err := l.validate(); err != nil {
		return fmt.Errorf("bucket %q: %w", id, err)
	}
	return nil
}

// stageTracer creates per-stage traces for explain output; nil when not explaining.
type stageTracer interface {
	stage(role registry.Role, g *engineGroup, reg *registry.Snapshot, model string) *policy.Trace
	done(t *policy.Trace, pick policy.Pick, err error)
}

// pickEngines asks the bucket's groups for a complete selection for req, among engines that
// declare adapter unless it is "": a Decision with BucketID and the plain pick, or PD set and
// the prefill and decode picks. A failure carries the stage it happened in (a *stageError). For
// PD, a decode failure discards the tentative prefill pick.
func (b *bucket) pickEngines(ctx context.Context, reg *registry.Snapshot, req *policy.Request, adapter string, tr stageTracer) (Decision, error) {
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
func (b *bucket) pickStage(ctx context.Context, reg *registry.Snapshot, req *policy.Request, adapter string, g *engineGroup, tr stageTracer) (policy.Pick, error) {
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
		return policy.Pick{}, &stageError{bucketID: b.id, stage: g.role, err: err}
	}
	return p, nil
}

// stageError is a failed group pick, retaining the bucket and stage it happened in.
type stageError struct {
	bucketID string
	stage    registry.Role
	err      error
}

func (e *stageError) Error() string {
	return fmt.Sprintf("bucket %q %s stage: %v", e.bucketID, e.stage, e.err)
}

func (e *stageError) Unwrap() error { return e.err }
