// Package interop tests sluice against the engines' own published KV-event
// code: the vLLM and SGLang wheels from PyPI, installed without their
// dependencies, publish real ZMQ KV-event streams and serve Prometheus
// metrics with the engines' metric names; a real `sluice enginelink` process
// forwards them to the real Kafka broker; a real `sluice decider` indexes them,
// and Decide (with explain) must pick the engine holding the prompt's prefix
// with the exact matched token count. TestInterop gives the link its engines
// in an -engines file; TestInteropFleet declares them only in the decider's
// configuration and lets the link follow the decider's engine registry.
//
// The scenarios: parent-linked stores (int and 32-byte hashes), EAGLE
// lookahead blocks, removals, clears, two DP ranks, a publisher that connects
// to the link's bound socket, LoRA adapters (lora_name and
// model=<declared adapter>), cache salts, two KV-cache groups, the STORAGE and CPU_PINNED tiers, a 100k-token SGLang
// prompt at page size 1, a lost batch without replay (uncertain residency in
// the explain note and the decider's metrics) and with replay (recovered), an
// engine restart (seq from 0 again), and the engines' load from /metrics and
// SGLang's /v1/loads in GET /v1/admin/engines.
//
// TestOpenAIClient is the gateway's OpenAI compatibility test: the official openai Python
// package (testdata/openai_client.py, in the venv scripts/lib/openaienv.sh pins from
// scripts/openai/requirements.txt, interpreter in SLUICE_TEST_OPENAI_PYTHON) against a real
// `sluice dev` process — chat, streaming chat (plain and PD), completions, the async client,
// models list and retrieve, and the error classes with OpenAI's error object. It needs no
// Kafka of the test script's (dev runs its own in-process broker).
//
// The package has only tests. The Python side lives in testdata/: engine.py
// drives the engines' publisher and recorder classes from commands the test
// sends on its stdin, stubs.py replaces the few GPU-only modules they import,
// metrics.py serves /metrics with the metric names read from the wheels.
//
// Run it alone with
//
//	scripts/test.sh -run TestInterop ./tests/interop/
//
// which starts a throwaway Postgres and Kafka broker and provisions the
// Python virtualenv (scripts/lib/pyenv.sh: the pinned set in
// scripts/interop/requirements.txt, cached under
// ${SLUICE_CACHE:-~/.cache/sluice}/interop-venv and rebuilt only when that file
// changes). The test reads the interpreter from SLUICE_TEST_PYTHON and the
// broker from SLUICE_TEST_KAFKA_BROKERS; when either is missing it fails under
// CI and skips elsewhere (SLUICE_TEST_NO_SERVICES=1 runs).
package interop
