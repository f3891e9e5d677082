# sluice developer tasks. `make` (or `make help`) lists them.
# Tools are pinned in tools/go.mod and run with `go tool`; nothing is
# installed globally and buf never talks to the Buf Schema Registry.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules
.DELETE_ON_ERROR:

GO ?= go
TOOL := $(GO) tool -modfile=tools/go.mod
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 20s
# How long the fuzzer may minimise each new interesting input. Go's default (60s per input)
# spends a short run minimising instead of fuzzing: FuzzParse finds hundreds of interesting
# inputs a minute, and with the default it ran 14 executions in 2 minutes.
FUZZMINIMIZETIME ?= 2s
# Flags for `make peer-bench` (tests/peer/cmd/peerbench -h lists them) and `make dev`.
ARGS ?=
# Benchmarked packages; directories that do not exist yet are skipped.
BENCH_PKGS := $(foreach d,decider state components services,$(if $(wildcard $(d)/.),./$(d)/...))
BENCH_COUNT ?= 5

.PHONY: help
help: ## Show this help
	@echo "Usage: make <target>"
	@echo
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) \
		| awk 'BEGIN {FS = ":.*## "} {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: dev
dev: ## Run `sluice dev` (the whole stack in one process); ARGS="-admin-token T" passes flags
	@echo "==> compiling sluice (the first build downloads modules and takes a minute or two), then starting sluice dev"
	$(GO) run ./services/sluice dev $(ARGS)

.PHONY: generate
generate: ## Lint the protos and regenerate gen/ (buf + pinned local plugins)
	scripts/generate.sh

.PHONY: check-generate
check-generate: ## Regenerate and fail if gen/ differs from git (diff or untracked files)
	scripts/generate.sh --check

.PHONY: lint
lint: ## Run buf lint/format checks and golangci-lint (incl. import-direction rules)
	scripts/lint.sh

.PHONY: fmt
fmt: ## Format protos (buf format) and Go code (gofmt, goimports)
	$(TOOL) buf format --write
	$(TOOL) golangci-lint fmt ./...

.PHONY: test
test: ## Run the full test suite with its services (scripts/test.sh)
	scripts/test.sh

.PHONY: test-compose
test-compose: ## Run only the compose smoke test: docker-compose.yaml up for real on a local dockerd (root; scripts/test.sh)
	SLUICE_TEST_COMPOSE=only scripts/test.sh

.PHONY: test-unit
test-unit: ## Run unit tests with the race detector, no external services
	$(GO) test -race -count=1 ./...

.PHONY: bench
bench: ## Run benchmarks (decider, state, components, services) into bench.out; summarise with benchstat if installed
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) $(BENCH_PKGS) | tee bench.out
	@if command -v benchstat >/dev/null 2>&1; then \
		benchstat bench.out; \
	else \
		echo "benchstat not installed (go install golang.org/x/perf/cmd/benchstat@latest); raw results in bench.out"; \
	fi

.PHONY: peer-bench
peer-bench: ## Live peer comparison: the real sglang-router vs sluice on simulated engines (ARGS="-window 5m -rounds 2"); writes BENCHMARKS-peer.md
	scripts/peer-bench.sh $(ARGS)

.PHONY: peer-bench-closed
peer-bench-closed: ## Closed-loop throughput, sglang-router vs sluice at 1/16/64 clients (ARGS="-rounds 5"); writes BENCHMARKS-peer.md
	scripts/peer-bench.sh -mode closed $(ARGS)

.PHONY: build
build: ## Build the sluice binary into bin/sluice
	$(GO) build -o bin/sluice ./services/sluice

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 20s) each, minimising inputs for at most FUZZMINIMIZETIME
	@found=0; \
	for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		targets=$$($(GO) test -list '^Fuzz' "$$pkg"); \
		for target in $$(grep '^Fuzz' <<<"$$targets" || true); do \
			found=$$((found + 1)); \
			echo "==> $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) "$$pkg"; \
		done; \
	done; \
	echo "fuzzed $$found target(s)"

.PHONY: tidy-tools
tidy-tools: ## Tidy the pinned tool module (tools/go.mod)
	cd tools && $(GO) mod tidy

# `make routing-quality`: sluice's policies beside the peer baselines (services/simulate,
# baselines.go) on the conversation trace, 8 engines, one run per speed. `make -j2` runs two
# speeds at once; each run uses one core.
ROUTING_TRACE ?= testdata/traces/conversation_trace.jsonl
ROUTING_WINDOW ?= 60m
ROUTING_SPEEDS ?= 1 2 3
ROUTING_OUT ?= routing-quality
ROUTING_POLICIES ?= ttft_aware,cache_aware,load_based,power_of_two,peer:sglang_cache_aware,peer:llmd,peer:dynamo,peer:least_load,peer:round_robin,peer:power_of_two

.PHONY: routing-quality
routing-quality: $(foreach s,$(ROUTING_SPEEDS),routing-quality-speed$(s)) ## Compare sluice's policies with the peer baselines (sluice simulate) into ROUTING_OUT/report.md
	cat $(foreach s,$(ROUTING_SPEEDS),$(ROUTING_OUT)/speed$(s)/report.md) > $(ROUTING_OUT)/report.md
	@echo "wrote $(ROUTING_OUT)/report.md (tables for BENCHMARKS.md, \"Routing quality (sluice simulate)\")"

routing-quality-speed%: build
	GOMAXPROCS=1 bin/sluice simulate -trace $(ROUTING_TRACE) -engines 8 -window $(ROUTING_WINDOW) -speed $* \
		-policies $(ROUTING_POLICIES) -out $(ROUTING_OUT)/speed$* > /dev/null

# `make sim-honesty`: one trace window through the live sluice dev stack (in-process Kafka,
# simengines over ZMQ and /v1/loads, enginelink, decider, gateway; real time) and through
# sluice simulate with the same settings (tests/honesty), side by side in HONESTY_OUT.
HONESTY_TRACE ?= testdata/traces/conversation_trace.jsonl
# HONESTY_DIAG gets the request-by-request comparison (transport, engine choice, the engine
# model replayed on the live routing).
HONESTY_OUT ?= routing-quality/honesty.md
HONESTY_DIAG ?= routing-quality/honesty-diagnosis.md
HONESTY_ARGS ?= -window 5m -speed 2 -policies cache_aware,ttft_aware

.PHONY: sim-honesty
sim-honesty: ## Check sluice simulate against the live stack on a 5-minute window (HONESTY_ARGS) into HONESTY_OUT and HONESTY_DIAG
	@mkdir -p $(dir $(HONESTY_OUT)) $(dir $(HONESTY_DIAG))
	$(GO) run ./tests/honesty/cmd/honesty -trace $(HONESTY_TRACE) $(HONESTY_ARGS) -out $(HONESTY_OUT) -diagnose $(HONESTY_DIAG)
