#!/usr/bin/env bash
# generate.sh regenerates gen/ from proto/ with buf and the plugins pinned in
# tools/go.mod. Nothing is fetched from the Buf Schema Registry.
#
#   scripts/generate.sh          lint the protos, then regenerate gen/
#   scripts/generate.sh --check  the same, then fail if gen/ differs from git
#                                (modified, deleted or untracked files)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

buf() { go tool -modfile=tools/go.mod buf "$@"; }

buf lint
buf format --diff --exit-code
# buf.gen.yaml sets clean: true, so stale files for removed protos disappear.
buf generate

if ((check)); then
  status=0
  if ! git diff --exit-code --stat -- gen/; then
    echo "gen/ differs from the committed code: run 'make generate' and commit gen/" >&2
    status=1
  fi
  untracked="$(git ls-files --others --exclude-standard -- gen/)"
  if [[ -n "$untracked" ]]; then
    printf 'untracked generated files (run make generate and commit them):\n%s\n' "$untracked" >&2
    status=1
  fi
  exit "$status"
fi
