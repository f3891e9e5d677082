package registry

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"time"

	"github.com/sluicehq/sluice/state/slots"
)

// Engine is one inference engine. A *Engine held by the registry is immutable;
// every Upsert or Replace allocates a new *Engine even when its fields are
// unchanged, so pointer identity tells a caller whether the engine it holds is
// still the current registration (compare with Snapshot.Get).
type Engine struct {
	// ID is the stable engine id; non-empty and unique within the registry.
	ID string
	// URL is the engine's absolute http or https base URL.
	URL string
	// Models are the model ids the engine serves; at least one, each
	// non-empty, none repeated.
	Models []string
	// Role is plain, prefill or decode.
	Role Role
	// BootstrapPort is the PD bootstrap port of a prefill engine (1..65535),
	// or 0 for none. Plain and decode engines must leave it 0.
	BootstrapPort uint32
	// Labels are free-form operator labels; nil when there are none.
	Labels map[string]string
	// KVEventsEndpoint, KVReplayEndpoint and MetricsURL tell enginelink in
	// fleet mode where the engine publishes KV events, replays them and
	// exposes metrics; empty when not declared (see config.EngineSpec).
	KVEventsEndpoint, KVReplayEndpoint, MetricsURL string
	// DPSize is the engine's data-parallel size; 0 or 1 when not data
	// parallel.
	DPSize int32
	// LoRAAdapters are the LoRA adapters the engine serves under their own
	// model names; nil when none. They belong to Models[0].
	LoRAAdapters []string
	// Slot is the engine's handle in the registry's slots.Table. The registry
	// assigns it; any value passed to Upsert or Replace is ignored.
	Slot slots.Slot
}

// Health is the health state of an engine. Health is separate from load: only
// an unhealthy engine stops being a candidate; unknown load does not.
type Health struct {
	// Healthy reports whether the engine may be picked.
	Healthy bool
	// Reason says why the engine is in this state (e.g. "probe failed: ...");
	// empty for engines healthy since registration.
	Reason string
	// Since is when the engine entered its current Healthy state.
	Since time.Time
}

// ErrInvalid is matched (errors.Is) by every validation error returned by
// Replace and Upsert, so transports can map it to InvalidArgument.
var ErrInvalid = errors.New("invalid worker configuration")

// ValidationError describes one invalid field of an engine set. Its message
// names the offending engine (or model), the field and value, and the fix,
// e.g. `worker "p1": url "x": must be an absolute http(s) URL`.
type ValidationError struct {
	// Engine is the offending engine's id; empty for a model-level problem.
	Engine string
	// Model is the offending model for a model-level problem; empty otherwise.
	Model string
	// Field is the field (and value) at fault, e.g. `url "x"`; may be empty.
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
}

// Error formats the error as `worker "id": field: problem` or
// `model "m": problem`.
func (e *ValidationError) Error() string {
	subject := fmt.Sprintf("worker %q", e.Engine)
	if e.Engine == "" && e.Model != "" {
		subject = fmt.Sprintf("model %q", e.Model)
	}
	if e.Field == "" {
		return subject + ": " + e.Problem
	}
	return subject + ": " + e.Field + ": " + e.Problem
}

// Unwrap returns ErrInvalid.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// clone returns a registry-owned copy of w with slot s, so later changes to
// the caller's slices or maps cannot reach the registry.
func (w *Engine) clone(s slots.Slot) *Engine {
	c := *w
	c.Models = slices.Clone(w.Models)
	if len(w.LoRAAdapters) == 0 {
		c.LoRAAdapters = nil
	} else {
		c.LoRAAdapters = slices.Clone(w.LoRAAdapters)
	}
	if len(w.Labels) == 0 {
		c.Labels = nil
	} else {
		c.Labels = maps.Clone(w.Labels)
	}
	c.Slot = s
	return &c
}

// validateEngine returns every problem with w's own fields.
func validateEngine(w *Engine) []error {
	var errs []error
	bad := func(field, problem string) {
		errs = append(errs, &ValidationError{Engine: w.ID, Field: field, Problem: problem})
	}
	if w.ID == "" {
		bad("id", "must be non-empty; give every worker a stable unique id")
	}
	if u, err := url.Parse(w.URL); err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(fmt.Sprintf("url %q", w.URL), "must be an absolute http(s) URL")
	}
	if len(w.Models) == 0 {
		bad("models", "must list at least one model id")
	}
	for i, m := range w.Models {
		if m == "" {
			bad(fmt.Sprintf("models[%d]", i), "must be a non-empty model id")
		} else if slices.Index(w.Models, m) < i {
			bad(fmt.Sprintf("models[%d] %q", i, m), "listed twice; list each model once")
		}
	}
	switch w.Role {
	case RolePlain, RolePrefill, RoleDecode:
	default:
		bad("role", "must be one of plain, prefill, decode")
	}
	switch {
	case w.BootstrapPort > 65535:
		bad(fmt.Sprintf("bootstrap_port %d", w.BootstrapPort), "must be at most 65535")
	case w.BootstrapPort != 0 && w.Role != RolePrefill:
		bad(fmt.Sprintf("bootstrap_port %d", w.BootstrapPort),
			fmt.Sprintf("only prefill engines take a bootstrap port; remove it or set role prefill (role is %s)", w.Role))
	}
	return errs
}

// validateSet validates every engine and the set as a whole: unique ids, and
// no model served by both plain and prefill/decode engines. ws must be sorted
// by ID. It returns nil or an errors.Join of *ValidationError values.
func validateSet(ws []*Engine) error {
	var errs []error
	for i, w := range ws {
		errs = append(errs, validateEngine(w)...)
		if i > 0 && ws[i-1].ID == w.ID && w.ID != "" {
			errs = append(errs, &ValidationError{Engine: w.ID, Field: "id", Problem: "duplicate; worker ids must be unique"})
		}
	}
	type firsts struct{ plain, pd *Engine }
	byModel := map[string]*firsts{}
	var models []string
	for _, w := range ws {
		for _, m := range w.Models {
			f := byModel[m]
			if f == nil {
				f = &firsts{}
				byModel[m] = f
				models = append(models, m)
			}
			switch {
			case w.Role == RolePlain && f.plain == nil:
				f.plain = w
			case w.Role.disaggregated() && f.pd == nil:
				f.pd = w
			}
		}
	}
	slices.Sort(models)
	for _, m := range models {
		if f := byModel[m]; f.plain != nil && f.pd != nil {
			errs = append(errs, &ValidationError{Model: m, Problem: fmt.Sprintf(
				"engines %s (%s) and %s (%s) mix plain and prefill/decode serving; use separate models",
				f.pd.ID, f.pd.Role, f.plain.ID, f.plain.Role)})
		}
	}
	return errors.Join(errs...)
}

// DrainedLabel marks an engine being drained: it stays registered so in-flight work finishes and
// its health and load stay visible, but it is no longer a candidate for new requests.
const DrainedLabel = "sluice.dev/drained"

// Drained reports whether the engine carries DrainedLabel=true.
func (w *Engine) Drained() bool { return w.Labels[DrainedLabel] == "true" }
