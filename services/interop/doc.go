// Package interop tests sluice against the engines' own published KV-event
// code: the vLLM and SGLang wheels from PyPI, installed without their
// dependencies, publish real ZMQ KV-event streams and serve Prometheus
// metrics with the engines' metric names; a real `sluice enginelink` process
// forwards them to the real Kafka broker; a real `sluice decider` indexes them,
// and Decide (with explain) must pick the engine holding the prompt's prefix
// with the exact matched token count.
//
// The package has only tests. The Python side lives in testdata/: engine.py
// drives the engines' publisher and recorder classes from commands the test
// sends on its stdin, stubs.py replaces the few GPU-only modules they import,
// metrics.py serves /metrics with the metric names read from the wheels.
//
// Run it alone with
//
//	scripts/test.sh -run TestInterop ./services/interop/
//
// which starts a throwaway Postgres and Kafka broker and provisions the
// Python virtualenv (scripts/lib/pyenv.sh: the pinned set in
// scripts/interop/requirements.txt, cached under
// ${SLUICE_CACHE:-~/.cache/sluice}/interop-venv and rebuilt only when that file
// changes). The test reads the interpreter from SLUICE_TEST_PYTHON and the
// broker from SLUICE_TEST_KAFKA_BROKERS; when either is missing it fails under
// CI and skips elsewhere (SLUICE_TEST_NO_SERVICES=1 runs).
package interop
