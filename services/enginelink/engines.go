package enginelink

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Engine kinds: they choose the sluice-format header of the KV records.
const (
	KindVLLM   = "vllm"
	KindSGLang = "sglang"
)

// KV record formats, as components/kvwire reads the sluice-format header.
const (
	FormatVLLMMsgpack   = "vllm.msgpack"
	FormatSGLangMsgpack = "sglang.msgpack"
)

// bindPrefix marks a kv_events_endpoint whose engine connects to the link's -kv-bind socket.
const bindPrefix = "bind"

// EngineSpec is one engine the link follows, from the -engines file, a -engine flag or the
// decider's engine registry (fleet mode). Two specs are the same engine iff they are equal.
type EngineSpec struct {
	// ID is the engine's stable id: the record key and the loadtable's engine id.
	ID string `json:"id" yaml:"id"`
	// Model is the model the engine's cached blocks belong to (sluice-model header).
	Model string `json:"model" yaml:"model"`
	// Engine is the kind, "vllm" (default) or "sglang".
	Engine string `json:"engine" yaml:"engine"`
	// KVEventsEndpoint is the engine's ZMQ PUB endpoint the link dials ("tcp://host:port",
	// "ipc://path"), or "bind"/"bind:..." when the engine connects to -kv-bind; empty means no
	// KV events.
	KVEventsEndpoint string `json:"kv_events_endpoint" yaml:"kv_events_endpoint"`
	// KVReplayEndpoint is the engine's ZMQ ROUTER replay endpoint; empty means gaps stay visible.
	KVReplayEndpoint string `json:"kv_replay_endpoint" yaml:"kv_replay_endpoint"`
	// MetricsURL is the engine's Prometheus endpoint; empty means no metrics scrape.
	MetricsURL string `json:"metrics_url" yaml:"metrics_url"`
	// LoadsURL is SGLang's /v1/loads; when set it is scraped instead of MetricsURL.
	LoadsURL string `json:"loads_url" yaml:"loads_url"`
	// DPSize is the data-parallel size; 0 means 1.
	DPSize int `json:"dp_size" yaml:"dp_size"`
	// LoRAName is sent as the sluice-lora header when set.
	LoRAName string `json:"lora_name" yaml:"lora_name"`
	// CacheSalt is sent as the sluice-cache-salt header when set.
	CacheSalt string `json:"cache_salt" yaml:"cache_salt"`
}

// ranks is the number of DP ranks, at least 1.
func (s EngineSpec) ranks() int { return max(s.DPSize, 1) }

// format is the sluice-format header value for the engine's kind.
func (s EngineSpec) format() string {
	if s.Engine == KindSGLang {
		return FormatSGLangMsgpack
	}
	return FormatVLLMMsgpack
}

// viaBind reports whether the engine's events arrive on the link's bound socket.
func (s EngineSpec) viaBind() bool {
	return s.KVEventsEndpoint == bindPrefix || strings.HasPrefix(s.KVEventsEndpoint, bindPrefix+":")
}

// dialsKV reports whether the link dials the engine's publisher.
func (s EngineSpec) dialsKV() bool { return s.KVEventsEndpoint != "" && !s.viaBind() }

// Topic is the ZMQ topic an engine that connects to -kv-bind must publish with.
func (s EngineSpec) Topic() string { return "kv@" + s.ID + "@" + s.Model }

// normalize fills defaults.
func (s EngineSpec) normalize() EngineSpec {
	s.Engine = strings.ToLower(strings.TrimSpace(s.Engine))
	if s.Engine == "" {
		s.Engine = KindVLLM
	}
	if s.DPSize == 0 {
		s.DPSize = 1
	}
	return s
}

// validate checks one normalized spec; where names the spec in messages.
func (s EngineSpec) validate(where string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(where+": "+format, args...))
	}
	if s.ID == "" {
		bad("id is empty: give every engine its stable id (the decider's engine id)")
	}
	if strings.Contains(s.ID, "@") {
		bad("id %q contains '@', which the ZMQ topic kv@<id>@<model> uses as separator: rename it", s.ID)
	}
	if s.Model == "" {
		bad("model is empty: set the model the engine serves (it seeds sluice's block hashes)")
	}
	if s.Engine != KindVLLM && s.Engine != KindSGLang {
		bad("engine %q: use vllm or sglang", s.Engine)
	}
	if s.DPSize < 1 || s.DPSize > 1024 {
		bad("dp_size %d: use 1..1024", s.DPSize)
	}
	if s.dialsKV() {
		for r := range s.ranks() {
			if _, err := rankEndpoint(s.KVEventsEndpoint, r); err != nil {
				bad("kv_events_endpoint: %v", err)
				break
			}
		}
	}
	if s.KVReplayEndpoint != "" {
		for r := range s.ranks() {
			if _, err := rankEndpoint(s.KVReplayEndpoint, r); err != nil {
				bad("kv_replay_endpoint: %v", err)
				break
			}
		}
	}
	for _, u := range []struct{ name, v string }{{"metrics_url", s.MetricsURL}, {"loads_url", s.LoadsURL}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("%s %q: use an absolute http(s) URL such as http://127.0.0.1:8000/metrics", u.name, u.v)
		}
	}
	return errors.Join(errs...)
}

// rankEndpoint is the endpoint of DP rank r, following vLLM's convention: rank 0 uses the
// endpoint as given; tcp ports are offset by the rank; ipc and inproc endpoints get "_dp<rank>".
func rankEndpoint(endpoint string, r int) (string, error) {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	if !ok || rest == "" {
		return "", fmt.Errorf("%q: use tcp://host:port, ipc://path or inproc://name", endpoint)
	}
	switch scheme {
	case "tcp":
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return "", fmt.Errorf("%q: tcp endpoints need a port (tcp://host:port)", endpoint)
		}
		port, err := strconv.Atoi(rest[i+1:])
		if err != nil || port <= 0 || port+r > 65535 {
			return "", fmt.Errorf("%q: port must be 1..65535 for every DP rank", endpoint)
		}
		if r == 0 {
			return endpoint, nil
		}
		return "tcp://" + rest[:i+1] + strconv.Itoa(port+r), nil
	case "ipc", "inproc":
		if r == 0 {
			return endpoint, nil
		}
		return endpoint + "_dp" + strconv.Itoa(r), nil
	}
	return "", fmt.Errorf("%q: unknown transport %q; use tcp, ipc or inproc", endpoint, scheme)
}

// LoadEngineFile reads a YAML (or JSON, which is YAML) list of engines. Unknown keys are errors,
// so a misspelt field is not silently ignored.
func LoadEngineFile(path string) ([]EngineSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-engines: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var specs []EngineSpec
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("-engines %s: %w (want a list of {id, model, engine, kv_events_endpoint, kv_replay_endpoint, metrics_url, loads_url, dp_size, lora_name, cache_salt})", path, err)
	}
	return specs, nil
}

// engineFlagKeys maps the short keys of -engine to fields.
var engineFlagKeys = []string{"id", "model", "engine", "kv", "replay", "metrics", "loads", "dp", "lora", "salt"}

// ParseEngineFlag parses one -engine value: comma-separated key=value pairs with keys id, model,
// engine, kv, replay, metrics, loads, dp, lora, salt.
func ParseEngineFlag(v string) (EngineSpec, error) {
	var s EngineSpec
	for _, kv := range strings.Split(v, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return s, fmt.Errorf("-engine %q: %q is not key=value (keys: %s)", v, kv, strings.Join(engineFlagKeys, ", "))
		}
		switch k {
		case "id":
			s.ID = val
		case "model":
			s.Model = val
		case "engine":
			s.Engine = val
		case "kv":
			s.KVEventsEndpoint = val
		case "replay":
			s.KVReplayEndpoint = val
		case "metrics":
			s.MetricsURL = val
		case "loads":
			s.LoadsURL = val
		case "dp":
			n, err := strconv.Atoi(val)
			if err != nil {
				return s, fmt.Errorf("-engine %q: dp=%q: use a whole number", v, val)
			}
			s.DPSize = n
		case "lora":
			s.LoRAName = val
		case "salt":
			s.CacheSalt = val
		default:
			return s, fmt.Errorf("-engine %q: unknown key %q (keys: %s)", v, k, strings.Join(engineFlagKeys, ", "))
		}
	}
	return s, nil
}

// normalizeSpecs fills defaults, validates every spec and rejects duplicate ids.
func normalizeSpecs(specs []EngineSpec, source string) ([]EngineSpec, error) {
	out := make([]EngineSpec, 0, len(specs))
	var errs []error
	seen := map[string]bool{}
	for i, s := range specs {
		s = s.normalize()
		where := fmt.Sprintf("%s engine %d (%q)", source, i, s.ID)
		if err := s.validate(where); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[s.ID] {
			errs = append(errs, fmt.Errorf("%s: id %q appears twice: engine ids must be unique", where, s.ID))
			continue
		}
		seen[s.ID] = true
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b EngineSpec) int { return strings.Compare(a.ID, b.ID) })
	return out, errors.Join(errs...)
}
