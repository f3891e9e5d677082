# shellcheck shell=bash
# Python virtualenv with schemathesis for the REST conformance test (services/decider
# TestSchemathesis), every package pinned in scripts/schemathesis/requirements.txt.
# Source after common.sh.
#
# schemathesis_wanted PKG...  is true when the go test packages include services/decider.
# schemathesis_setup          creates the venv once under
#                             ${SLUICE_CACHE:-$HOME/.cache/sluice}/schemathesis-venv, re-uses
#                             it while the requirements file (and the python3 version) are
#                             unchanged (stamp: requirements.sha256 in the venv), and exports
#                               SLUICE_TEST_SCHEMATHESIS  the venv's schemathesis command
#                             Needs python3 with venv and PyPI; installs python3-venv when root.

# schemathesis_requirements prints the path of scripts/schemathesis/requirements.txt.
schemathesis_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../schemathesis" && pwd)/requirements.txt"; }

# schemathesis_wanted PKG... is true when one of the go package patterns covers services/decider.
schemathesis_wanted() {
  local p
  for p in "$@"; do
    case "$p" in
      ./... | all | ./services/... | ./services/decider | ./services/decider/ | ./services/decider/... | \
        github.com/sluicehq/sluice/... | github.com/sluicehq/sluice/services/... | \
        github.com/sluicehq/sluice/services/decider | github.com/sluicehq/sluice/services/decider/...)
        return 0
        ;;
    esac
  done
  return 1
}

# schemathesis_setup: see the file comment.
schemathesis_setup() {
  local req cache venv want stamp t0 lockfd logf
  t0=$SECONDS
  command -v python3 >/dev/null || apt_install python3 python3-venv
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install python3-venv
  fi
  req="$(schemathesis_requirements)"
  cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}"
  venv="$cache/schemathesis-venv"
  logf="$cache/schemathesis-venv.log"
  want="$( (cat "$req" && python3 -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
  stamp="$venv/requirements.sha256"
  mkdir -p "$cache"
  # One build at a time per cache, even with concurrent test.sh runs.
  exec {lockfd}>"$cache/.schemathesis-venv.lock"
  flock "$lockfd"
  if [[ -x "$venv/bin/schemathesis" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exec {lockfd}>&-
    export SLUICE_TEST_SCHEMATHESIS="$venv/bin/schemathesis"
    log "schemathesis: using cached $venv ($(du -sh "$venv" 2>/dev/null | cut -f1))"
    return 0
  fi
  log "schemathesis: creating $venv from $req (first run fetches ~25 packages from PyPI)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$logf" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$logf"
    die "schemathesis: python3 -m venv $venv failed"
  fi
  log "schemathesis: pip install --no-deps -r $(basename "$req")"
  # --no-deps: the file pins every dependency, so nothing unpinned comes along.
  if ! "$venv/bin/pip" install --disable-pip-version-check --no-input --no-deps -r "$req" >>"$logf" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$logf"
    die "schemathesis: pip install into $venv failed (log: $logf)"
  fi
  if ! "$venv/bin/schemathesis" --version >>"$logf" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$logf"
    die "schemathesis: the venv's schemathesis does not run"
  fi
  echo "$want" >"$stamp"
  exec {lockfd}>&-
  export SLUICE_TEST_SCHEMATHESIS="$venv/bin/schemathesis"
  log "schemathesis: ready in $((SECONDS - t0))s ($("$venv/bin/schemathesis" --version), $(du -sh "$venv" | cut -f1))"
}
