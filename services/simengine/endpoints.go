package simengine

import (
	"context"
	"fmt"
)

// Endpoints is what a follower such as sluice enginelink needs to treat this sim as the real
// engine it imitates: where its load is scraped and where its KV events come from.
type Endpoints struct {
	// ID and Model are the engine id and served model.
	ID, Model string
	// Engine is the imitated engine, "vllm" or "sglang" (-metrics-naming).
	Engine string
	// KVFormat is the KV-event payload format, "vllm" or "sglang" (-kv-events-format).
	KVFormat string
	// BaseURL is the HTTP base URL, MetricsURL its /metrics and LoadsURL SGLang's /v1/loads
	// ("" for vLLM, which has none).
	BaseURL, MetricsURL, LoadsURL string
	// DPSize is the number of data-parallel ranks.
	DPSize int
	// LoRAAdapters are the adapters served beside Model.
	LoRAAdapters []string
	// KV and Replay are the PUB and replay endpoints of each DP rank, by rank, as
	// KVEventsEndpoints returns them; nil when KV events over ZMQ are off (Replay also
	// without -kv-replay-endpoint). A connecting PUB reports the subscriber it dials.
	KV, Replay []string
	// Topic is the topic frame of every KV-event message.
	Topic string
	// Binds reports whether the PUB sockets bind (a follower dials them) or connect to a
	// bound follower (which tells engines apart by Topic).
	Binds bool
}

// Endpoints waits until Run has set up every rank's KV-event sockets (when KV events are on)
// and returns the engine's endpoints. It fails with ctx's error, or a rank's bind error.
func (s *Server) Endpoints(ctx context.Context) (Endpoints, error) {
	base := "http://" + s.Addr()
	e := Endpoints{ID: s.cfg.ID, Model: s.cfg.Model, Engine: s.cfg.MetricsNaming, KVFormat: s.cfg.kvEventsFormat(),
		BaseURL: base, MetricsURL: base + "/metrics", DPSize: len(s.engines), LoRAAdapters: s.cfg.Adapters(), Topic: s.cfg.KVEventsTopic,
		Binds: s.cfg.KVEventsEndpoint != "" && zmqBinds(s.cfg.KVEventsEndpoint)}
	if s.cfg.MetricsNaming == NamingSGLang {
		e.LoadsURL = base + "/v1/loads"
	}
	for rank := range s.kvZMQ {
		pub, replay, err := s.KVEventsEndpoints(ctx, rank)
		if err != nil {
			return Endpoints{}, fmt.Errorf("simengine: DP rank %d KV-event sockets: %w", rank, err)
		}
		e.KV = append(e.KV, pub)
		if replay != "" {
			e.Replay = append(e.Replay, replay)
		}
	}
	return e, nil
}
