package decider

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/decider/policy"
	"github.com/sluicehq/sluice/state/registry"
)

// LoRA adapters. vLLM serves an adapter under its own model name, so a request may name an
// adapter as its model; engines declare the adapters they serve (registry.Engine.LoRAAdapters,
// belonging to the engine's first model). SGLang names the adapter beside the model (lora_path),
// which arrives as policy.Request.LoRAName. Either way the request is routed in the base model's buckets,
// to engines that serve the adapter, and its prefix is looked up in the adapter's namespace.

// adapterRoute is a request's model after adapter resolution.
type adapterRoute struct {
	// model is the base model whose buckets and engines serve the request.
	model string
	// lora is the adapter, "" for the base model.
	lora string
	// require restricts candidates to engines declaring lora.
	require bool
}

// resolveAdapter resolves req's model and adapter against the registry:
//   - a registered model with no LoRAName: the base model, no adapter;
//   - a registered model with LoRAName a: adapter a, on the engines that declare a — or, when no
//     engine of the model declares any adapter named a, on all of them (adapters the operator
//     does not list, e.g. loaded on demand by SGLang);
//   - a model that is no engine's model but an adapter some engines declare: that adapter, on
//     those engines, in their base model (Models[0]); LoRAName, if set, must name the same
//     adapter, and all declaring engines must share the base model.
//
// Anything else is UNKNOWN_MODEL.
func resolveAdapter(reg *registry.Snapshot, req *policy.Request) (adapterRoute, *Error) {
	if _, ok := slices.BinarySearch(reg.Models(), req.Model); ok {
		r := adapterRoute{model: req.Model, lora: req.LoRAName}
		if r.lora != "" {
			r.require = declares(reg, r.model, r.lora)
		}
		return r, nil
	}
	var bases []string
	for _, w := range reg.Engines() {
		if slices.Contains(w.LoRAAdapters, req.Model) && !slices.Contains(bases, w.Models[0]) {
			bases = append(bases, w.Models[0])
		}
	}
	switch {
	case len(bases) == 0:
		return adapterRoute{}, unknownModel(req.Model, reg.Models())
	case len(bases) > 1:
		slices.Sort(bases)
		return adapterRoute{}, invalidArgument(reasonAdapterConflict,
			"model %q is a LoRA adapter of several base models (%s); send the base model as model and the adapter as lora_name",
			req.Model, strings.Join(bases, ", "))
	case req.LoRAName != "" && req.LoRAName != req.Model:
		return adapterRoute{}, invalidArgument(reasonAdapterConflict,
			"model %q is a LoRA adapter but lora_name is %q; name one adapter (or send the base model %q as model)",
			req.Model, req.LoRAName, bases[0])
	}
	return adapterRoute{model: bases[0], lora: req.Model, require: true}, nil
}

// declares reports whether any engine of model declares adapter.
func declares(reg *registry.Snapshot, model, adapter string) bool {
	for _, w := range reg.Engines() {
		if len(w.Models) > 0 && w.Models[0] == model && slices.Contains(w.LoRAAdapters, adapter) {
			return true
		}
	}
	return false
}

// servesAdapter reports whether w may serve a request for adapter ("" = no restriction).
func servesAdapter(w *registry.Engine, adapter string) bool {
	return adapter == "" || slices.Contains(w.LoRAAdapters, adapter)
}
