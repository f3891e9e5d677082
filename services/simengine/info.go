package simengine

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// sglangDefaultBootstrapPort is SGLang's --disaggregation-bootstrap-port default, reported by
// engines whose role opens no bootstrap port.
const sglangDefaultBootstrapPort = 8998

// ModelInfo is SGLang's GET /model_info (and the deprecated /get_model_info).
type ModelInfo struct {
	ModelPath               string          `json:"model_path"`
	TokenizerPath           string          `json:"tokenizer_path"`
	IsGeneration            bool            `json:"is_generation"`
	PreferredSamplingParams json.RawMessage `json:"preferred_sampling_params"`
	WeightVersion           string          `json:"weight_version"`
	HasImageUnderstanding   bool            `json:"has_image_understanding"`
	HasAudioUnderstanding   bool            `json:"has_audio_understanding"`
	ModelType               string          `json:"model_type"`
	Architectures           []string        `json:"architectures"`
}

// modelInfo serves /model_info: the served model is its own path and tokenizer, generates
// text and nothing else.
func (s *Server) modelInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, ModelInfo{ModelPath: s.cfg.Model, TokenizerPath: s.cfg.Model, IsGeneration: true,
		PreferredSamplingParams: json.RawMessage("null"), WeightVersion: "default",
		ModelType: "simengine", Architectures: []string{"SimEngineForCausalLM"}})
}

// disaggregationMode is SGLang's name for the role: "null" (no PD), "prefill" or "decode".
func (s *Server) disaggregationMode() string {
	if s.role == engine.RolePlain {
		return "null"
	}
	return s.role.String()
}

// kvEventsConfig is the --kv-events-config JSON string SGLang would have been started with
// for the same stream, or nil when KV events are off.
func (s *Server) kvEventsConfig() any {
	if s.cfg.KVEventsEndpoint == "" {
		return nil
	}
	c := map[string]any{"publisher": "zmq", "endpoint": s.cfg.KVEventsEndpoint, "topic": s.cfg.KVEventsTopic,
		"buffer_steps": s.cfg.KVReplayBuffer}
	if s.cfg.KVReplayEndpoint != "" {
		c["replay_endpoint"] = s.cfg.KVReplayEndpoint
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// serverInfo serves SGLang's GET /server_info (and the deprecated /get_server_info): its server
// arguments, the scheduler info, one internal state per DP rank and the version, each field
// set from the simulation's own configuration.
func (s *Server) serverInfo(w http.ResponseWriter, _ *http.Request) {
	host, portStr, _ := net.SplitHostPort(s.Addr())
	port, _ := strconv.Atoi(portStr)
	boot := s.BootstrapPort()
	if boot == 0 {
		boot = sglangDefaultBootstrapPort
	}
	capacity := s.engines[0].Load().KVCapacityTokens
	var states []map[string]any
	for _, e := range s.engines {
		l := e.Load()
		states = append(states, map[string]any{
			"last_gen_throughput":  s.cfg.genThroughput(l),
			"max_total_num_tokens": l.KVCapacityTokens,
			"num_running_reqs":     l.Running,
			"num_waiting_reqs":     l.Waiting,
		})
	}
	writeJSON(w, map[string]any{
		// Server arguments.
		"model_path":                      s.cfg.Model,
		"tokenizer_path":                  s.cfg.Model,
		"served_model_name":               s.cfg.Model,
		"host":                            host,
		"port":                            port,
		"tp_size":                         1,
		"dp_size":                         len(s.engines),
		"pp_size":                         1,
		"ep_size":                         1,
		"enable_dp_attention":             false,
		"load_balance_method":             "round_robin",
		"page_size":                       s.cfg.BlockSize,
		"max_running_requests":            s.cfg.MaxRunning,
		"max_total_tokens":                capacity,
		"context_length":                  capacity,
		"schedule_policy":                 "fcfs",
		"disable_radix_cache":             false,
		"is_embedding":                    false,
		"skip_tokenizer_init":             false,
		"enable_metrics":                  true,
		"enable_lora":                     len(s.adapters) > 0,
		"lora_paths":                      s.adapters,
		"kv_events_config":                s.kvEventsConfig(),
		"disaggregation_mode":             s.disaggregationMode(),
		"disaggregation_bootstrap_port":   boot,
		"disaggregation_transfer_backend": "mooncake",
		// Scheduler info.
		"status":               "ready",
		"max_total_num_tokens": capacity,
		"max_req_input_len":    capacity - 1,
		// Per DP rank, then the version.
		"internal_states": states,
		"version":         SGLangVersion,
	})
}

// healthGenerate serves SGLang's GET /health_generate: it runs a one-token generation of prompt
// [0] through the engine, as SGLang does, and answers 200 once it produced the token or 503
// when the engine is marked unhealthy or the run fails.
func (s *Server) healthGenerate(w http.ResponseWriter, r *http.Request) {
	if s.failed.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	rank, _ := s.pick(nil)
	run, err := s.engines[rank].Submit(r.Context(), engine.Request{TokenIDs: []uint32{0}, MaxTokens: 1})
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if _, err := run.Result(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// version serves vLLM's GET /version.
func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]string{"version": VLLMVersion})
}
