#!/usr/bin/env bash
# lint.sh lints the protos (buf lint, buf format) and the Go code
# (golangci-lint with .golangci.yml: standard linters, depguard import
# directions, errorlint, forbidigo, containedctx, gochecknoinits, gofmt,
# goimports). Extra arguments go to
# golangci-lint run, e.g. scripts/lint.sh --fix.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

tool() { go tool -modfile=tools/go.mod "$@"; }

tool buf lint
tool buf format --diff --exit-code
tool golangci-lint config verify
tool golangci-lint run "$@" ./...
