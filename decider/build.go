package decider

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/config"
	"github.com/sluicehq/sluice/state/registry"
)

// buildResolver builds one model's buckets, groups and policy instances from a validated
// document. Each group gets its own policy instance (its own cursor); a group without a policy
// takes the model's default for its stage, then the document's, then power_of_two. With all set
// every bucket is built regardless of its model filter (validation).
func (d *Decider) buildResolver(doc *config.Document, model string, all bool) (*bucketResolver, error) {
	var buckets []*bucket
	for _, bs := range doc.EffectiveBuckets() {
		if !all && bs.Models != nil && !slices.Contains(bs.Models, model) {
			continue
		}
		limits := lengthLimits{MinInput: bs.Limits.Min, MaxInput: Unbounded, MaxContext: Unbounded}
		if bs.Limits.Max != nil {
			limits.MaxInput = *bs.Limits.Max
		}
		if bs.MaxContextTokens != nil {
			limits.MaxContext = *bs.MaxContextTokens
		}
		var (
			b   *bucket
			err error
		)
		switch {
		case bs.Groups.Plain != nil:
			g, gerr := d.buildGroup(doc, model, registry.RolePlain, bs.Groups.Plain)
			if gerr != nil {
				return nil, fmt.Errorf("bucket %q plain group: %w", bs.ID, gerr)
			}
			b, err = newPlainBucket(bs.ID, bs.Rank, limits, g)
		case bs.Groups.PD != nil && bs.Groups.PD.Prefill != nil && bs.Groups.PD.Decode != nil:
			pre, gerr := d.buildGroup(doc, model, registry.RolePrefill, bs.Groups.PD.Prefill)
			if gerr != nil {
				return nil, fmt.Errorf("bucket %q prefill group: %w", bs.ID, gerr)
			}
			dec, gerr := d.buildGroup(doc, model, registry.RoleDecode, bs.Groups.PD.Decode)
			if gerr != nil {
				return nil, fmt.Errorf("bucket %q decode group: %w", bs.ID, gerr)
			}
			b, err = newPDBucket(bs.ID, bs.Rank, limits, pre, dec)
		default:
			err = fmt.Errorf("bucket %q: groups must be plain or a complete pd pair", bs.ID)
		}
		if err != nil {
			return nil, err
		}
		buckets = append(buckets, b)
	}
	return newBucketResolver(buckets)
}

func (d *Decider) buildGroup(doc *config.Document, model string, role registry.Role, gs *config.GroupSpec) (*engineGroup, error) {
	spec := doc.PolicyFor(model, role.String(), gs)
	p, err := policy.New(spec, d.deps)
	if err != nil {
		return nil, err
	}
	if gs.EngineIDs == nil {
		return newEngineGroup(role, p), nil
	}
	return newEngineGroupOf(role, p, *gs.EngineIDs), nil
}

func isNoCandidates(err error) bool { return errors.Is(err, policy.ErrNoCandidates) }

func isRejected(err error) bool {
	var rj *policy.RejectedError
	return errors.As(err, &rj)
}
