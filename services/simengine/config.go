package simengine

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/sluicehq/sluice/internal/flagenv"

	"github.com/sluicehq/sluice/services/simengine/engine"
)

// KV payload formats (-kv-format) and metric namings (-metrics-naming).
const (
	KVFormatProto       = "proto"
	KVFormatVLLMMsgpack = "vllm-msgpack"
	NamingSGLang        = "sglang"
	NamingVLLM          = "vllm"
)

// maxDPSize bounds -dp-size.
const maxDPSize = 64

// Config is the simengine's configuration, bound to flags with SLUICE_* environment fallbacks
// in main and validated by New.
type Config struct {
	// Addr is the HTTP listen address.
	Addr string
	// ID is the engine id in load reports and KV events (the Kafka record key).
	ID string
	// Model is the served model name.
	Model string
	// Role is plain, prefill or decode.
	Role string
	// BootstrapPort is the prefill engine's KV bootstrap port; 0 picks a free one. Ignored by
	// other roles.
	BootstrapPort int
	// CheckBootstrap makes a decode engine connect to the request's bootstrap host and port
	// (the KV handoff) and fail the request when it cannot.
	CheckBootstrap bool
	// StartFailed starts the engine unhealthy (as after POST /admin/fail).
	StartFailed bool

	// KafkaBrokers, comma-separated: the sim writes sluice's own LoadReport and KV records there
	// itself, bypassing enginelink. Empty writes nothing to Kafka (what a real engine does).
	KafkaBrokers string
	LoadTopic    string
	KVTopic      string
	// KVFormat is proto (sluice.v1.KvEventBatch) or vllm-msgpack (vLLM's own batch).
	KVFormat string
	// LoadInterval is the load-report period; KVInterval the KV-event batching period.
	LoadInterval time.Duration
	KVInterval   time.Duration

	// MetricsNaming is sglang or vllm: the engine whose /metrics names and labels the sim
	// imitates, and the default of KVEventsFormat.
	MetricsNaming string

	// KVEventsEndpoint is the ZMQ PUB endpoint of the KV-event stream, like the "endpoint" of
	// vLLM's and SGLang's --kv-events-config: tcp://*:PORT binds; tcp://HOST:PORT connects
	// to a subscriber that binds (sluice enginelink's bound mode); ipc:// and inproc:// bind.
	// Empty publishes no KV events over ZMQ.
	KVEventsEndpoint string
	// KVEventsTopic fills the topic frame of every message. The engines default to "";
	// enginelink's bound mode expects "kv@<engine id>@<model>" to tell engines apart.
	KVEventsTopic string
	// KVEventsFormat is the payload: vllm (vLLM 0.33) or sglang (SGLang 0.5.23); empty
	// follows MetricsNaming.
	KVEventsFormat string
	// KVReplayEndpoint is the ROUTER replay endpoint (vLLM's replay_endpoint; it always
	// binds); empty serves no replay.
	KVReplayEndpoint string
	// KVReplayBuffer is how many published batches the replay socket can resend.
	KVReplayBuffer int

	// LoRAAdapters names the LoRA adapters served beside the base model, comma-separated. A
	// request for one (its OpenAI "model", or SGLang's lora_path) runs in the adapter's own
	// prefix-cache namespace and its KV events carry lora_name (vLLM also lora_id, the
	// adapter's 1-based position here).
	LoRAAdapters string

	// DPSize is the number of data-parallel ranks: each has its own engine (queue, slots and
	// prefix cache), KV-event PUB (port + rank) and series in /metrics and /v1/loads.
	DPSize int

	BlockSize           int
	CacheBlocks         int
	MaxRunning          int
	PrefillTokensPerSec float64
	DecodeMsPerToken    float64
	Speed               float64
	// DefaultMaxTokens applies when a request gives no max_tokens.
	DefaultMaxTokens int

	// ShutdownTimeout bounds the graceful drain.
	ShutdownTimeout time.Duration

	// OnResult, when set, is called with every generation that ran to its end: which engine
	// rank ran it, when it was handed to the engine model, its prompt and the engine's own queue
	// and prefill times (tests/honesty compares them with sluice simulate's). It has no flag; it
	// must be safe for concurrent use and must not modify the prompt.
	OnResult func(Generation)
}

// Generation is one finished generation as Config.OnResult sees it.
type Generation struct {
	// EngineID is Config.ID and Rank the DP rank that ran the request.
	EngineID string
	Rank     int
	// RequestID is the request's X-Request-Id header ("" without one).
	RequestID string
	// Submitted is when the request was handed to the engine model (wall clock).
	Submitted time.Time
	// Prompt is the request's prompt (shared: read-only).
	Prompt []uint32
	engine.Result
}

// DefaultConfig returns the defaults every flag starts from.
func DefaultConfig() Config {
	return Config{
		Addr:                ":8000",
		ID:                  "sim-0",
		Model:               "sim-model",
		Role:                "plain",
		CheckBootstrap:      true,
		LoadTopic:           "sluice.engine-load.v1",
		KVTopic:             "sluice.kv-events.v1",
		KVFormat:            KVFormatProto,
		LoadInterval:        500 * time.Millisecond,
		KVInterval:          50 * time.Millisecond,
		MetricsNaming:       NamingSGLang,
		KVReplayBuffer:      DefaultKVReplayBuffer,
		DPSize:              1,
		BlockSize:           engine.DefaultBlockSize,
		CacheBlocks:         engine.DefaultCacheBlocks,
		MaxRunning:          engine.DefaultMaxRunning,
		PrefillTokensPerSec: engine.DefaultPrefillTokensPerSec,
		DecodeMsPerToken:    engine.DefaultDecodeMsPerToken,
		Speed:               1,
		DefaultMaxTokens:    engine.DefaultMaxTokens,
		ShutdownTimeout:     10 * time.Second,
	}
}

// RegisterFlags binds c's fields to fs; values already in c are the defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "HTTP listen address")
	fs.StringVar(&c.ID, "id", c.ID, "engine id in load reports and KV events (Kafka record key)")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.StringVar(&c.Role, "role", c.Role, "plain, prefill or decode")
	fs.IntVar(&c.BootstrapPort, "bootstrap-port", c.BootstrapPort, "prefill role: KV bootstrap listen port (0 = any free port)")
	fs.BoolVar(&c.CheckBootstrap, "check-bootstrap", c.CheckBootstrap, "decode role: connect to the request's bootstrap host:port and fail the request if it cannot")
	fs.BoolVar(&c.StartFailed, "fail", c.StartFailed, "start unhealthy: /health and the generation routes answer 503 until POST /admin/recover")
	fs.StringVar(&c.KafkaBrokers, "kafka-brokers", c.KafkaBrokers, "comma-separated Kafka brokers the sim writes sluice's own load and KV records to, bypassing enginelink; empty = no Kafka (a real engine has none: use -kv-events-endpoint)")
	fs.StringVar(&c.LoadTopic, "load-topic", c.LoadTopic, "Kafka topic for LoadReport records")
	fs.StringVar(&c.KVTopic, "kv-topic", c.KVTopic, "Kafka topic for KV-event records")
	fs.StringVar(&c.KVFormat, "kv-format", c.KVFormat, "KV-event payload: proto (sluice.v1.KvEventBatch) or vllm-msgpack")
	fs.DurationVar(&c.LoadInterval, "load-interval", c.LoadInterval, "load report period")
	fs.DurationVar(&c.KVInterval, "kv-interval", c.KVInterval, "KV-event batching period (Kafka and ZMQ)")
	fs.StringVar(&c.MetricsNaming, "metrics-naming", c.MetricsNaming, "engine imitated by /metrics (names, labels) and the default KV-event format: sglang or vllm")
	fs.StringVar(&c.KVEventsEndpoint, "kv-events-endpoint", c.KVEventsEndpoint, "ZMQ PUB endpoint for KV events (vLLM/SGLang wire): tcp://*:PORT binds, tcp://HOST:PORT connects to a bound subscriber, ipc:// and inproc:// bind; empty = off")
	fs.StringVar(&c.KVEventsTopic, "kv-events-topic", c.KVEventsTopic, "topic frame of every KV-event message; enginelink's bound mode expects kv@<engine id>@<model>")
	fs.StringVar(&c.KVEventsFormat, "kv-events-format", c.KVEventsFormat, "KV-event payload over ZMQ: vllm or sglang (empty = as -metrics-naming)")
	fs.StringVar(&c.KVReplayEndpoint, "kv-replay-endpoint", c.KVReplayEndpoint, "ZMQ ROUTER replay endpoint (binds), e.g. tcp://*:5558; empty = no replay")
	fs.IntVar(&c.KVReplayBuffer, "kv-replay-buffer", c.KVReplayBuffer, "KV-event batches kept for replay")
	fs.StringVar(&c.LoRAAdapters, "lora-adapters", c.LoRAAdapters, "comma-separated LoRA adapters served beside -model; requests name one as their model (or SGLang lora_path) and get its own cache namespace")
	fs.IntVar(&c.DPSize, "dp-size", c.DPSize, "data-parallel ranks, each with its own engine, cache and KV-event PUB (port + rank); requests go round-robin unless they set data_parallel_rank")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "tokens per KV block")
	fs.IntVar(&c.CacheBlocks, "cache-blocks", c.CacheBlocks, "prefix cache capacity in blocks")
	fs.IntVar(&c.MaxRunning, "max-running", c.MaxRunning, "requests running at once; the rest queue")
	fs.Float64Var(&c.PrefillTokensPerSec, "prefill-tokens-per-sec", c.PrefillTokensPerSec, "prefill throughput of each rank for uncached prompt tokens (one request at a time, FCFS)")
	fs.Float64Var(&c.DecodeMsPerToken, "decode-ms-per-token", c.DecodeMsPerToken, "time per output token (ms)")
	fs.Float64Var(&c.Speed, "speed", c.Speed, "divides every simulated duration (100 = a hundred times faster)")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "graceful shutdown deadline")
}

// Adapters returns the parsed LoRA adapter names, in order.
func (c *Config) Adapters() []string { return flagenv.List(c.LoRAAdapters) }

// Brokers returns the parsed broker list.
func (c *Config) Brokers() []string { return flagenv.List(c.KafkaBrokers) }

// Validate checks every field and reports all problems, each naming the flag and the fix.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("-addr %q: want host:port (e.g. :8000): %w", c.Addr, err))
	}
	if c.ID == "" {
		errs = append(errs, errors.New("-id: must not be empty"))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("-model: must not be empty"))
	}
	if _, err := engine.ParseRole(c.Role); err != nil {
		errs = append(errs, fmt.Errorf("-role: %w", err))
	}
	if c.BootstrapPort < 0 || c.BootstrapPort > 65535 {
		errs = append(errs, fmt.Errorf("-bootstrap-port %d: want 0..65535", c.BootstrapPort))
	}
	if c.KVFormat != KVFormatProto && c.KVFormat != KVFormatVLLMMsgpack {
		errs = append(errs, fmt.Errorf("-kv-format %q: use %s or %s", c.KVFormat, KVFormatProto, KVFormatVLLMMsgpack))
	}
	if c.MetricsNaming != NamingSGLang && c.MetricsNaming != NamingVLLM {
		errs = append(errs, fmt.Errorf("-metrics-naming %q: use %s or %s", c.MetricsNaming, NamingSGLang, NamingVLLM))
	}
	if c.KVEventsEndpoint != "" {
		if err := validateZMQEndpoint("kv-events-endpoint", c.KVEventsEndpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if c.KVReplayEndpoint != "" {
		if c.KVEventsEndpoint == "" {
			errs = append(errs, errors.New("-kv-replay-endpoint: needs -kv-events-endpoint (replay resends the PUB stream)"))
		} else if err := validateZMQEndpoint("kv-replay-endpoint", c.KVReplayEndpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if f := c.KVEventsFormat; f != "" && f != KVEventsVLLM && f != KVEventsSGLang {
		errs = append(errs, fmt.Errorf("-kv-events-format %q: use %s or %s (or leave it empty to follow -metrics-naming)", f, KVEventsVLLM, KVEventsSGLang))
	}
	if c.KVReplayBuffer <= 0 {
		errs = append(errs, fmt.Errorf("-kv-replay-buffer %d: must be positive (vLLM keeps %d)", c.KVReplayBuffer, DefaultKVReplayBuffer))
	}
	seen := map[string]bool{c.Model: true}
	for _, a := range c.Adapters() {
		if seen[a] {
			errs = append(errs, fmt.Errorf("-lora-adapters: %q is listed twice or is the base -model; name each adapter once", a))
		}
		seen[a] = true
	}
	if c.DPSize < 1 || c.DPSize > maxDPSize {
		errs = append(errs, fmt.Errorf("-dp-size %d: want 1..%d", c.DPSize, maxDPSize))
	} else if c.DPSize > 1 && len(c.Brokers()) > 0 {
		errs = append(errs, fmt.Errorf("-dp-size %d: Kafka publishing (-kafka-brokers) serves one rank only; use -kv-events-endpoint for DP ranks", c.DPSize))
	}
	if len(c.Brokers()) > 0 {
		if c.LoadTopic == "" || c.KVTopic == "" {
			errs = append(errs, errors.New("-load-topic and -kv-topic: must not be empty when -kafka-brokers is set"))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"load-interval", c.LoadInterval}, {"kv-interval", c.KVInterval}, {"shutdown-timeout", c.ShutdownTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("-%s %v: must be positive", d.flag, d.v))
		}
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"block-size", c.BlockSize}, {"cache-blocks", c.CacheBlocks}, {"max-running", c.MaxRunning}, {"default-max-tokens", c.DefaultMaxTokens}} {
		if p.v <= 0 {
			errs = append(errs, fmt.Errorf("-%s %d: must be positive", p.flag, p.v))
		}
	}
	if c.DefaultMaxTokens > engine.MaxOutputTokens {
		errs = append(errs, fmt.Errorf("-default-max-tokens %d: at most %d", c.DefaultMaxTokens, engine.MaxOutputTokens))
	}
	for _, p := range []struct {
		flag string
		v    float64
	}{{"prefill-tokens-per-sec", c.PrefillTokensPerSec}, {"decode-ms-per-token", c.DecodeMsPerToken}, {"speed", c.Speed}} {
		if !(p.v > 0) {
			errs = append(errs, fmt.Errorf("-%s %v: must be positive", p.flag, p.v))
		}
	}
	return errors.Join(errs...)
}

// kvEventsFormat is KVEventsFormat with its default applied.
func (c *Config) kvEventsFormat() string {
	if c.KVEventsFormat != "" {
		return c.KVEventsFormat
	}
	if c.MetricsNaming == NamingVLLM {
		return KVEventsVLLM
	}
	return KVEventsSGLang
}

func (c *Config) engineConfig(sink engine.Sink) engine.Config {
	role, _ := engine.ParseRole(c.Role)
	return engine.Config{
		Role: role, BlockSize: c.BlockSize, CacheBlocks: c.CacheBlocks, MaxRunning: c.MaxRunning,
		PrefillTokensPerSec: c.PrefillTokensPerSec, DecodeMsPerToken: c.DecodeMsPerToken, Speed: c.Speed,
		DefaultMaxTokens: c.DefaultMaxTokens, Sink: sink,
	}
}
