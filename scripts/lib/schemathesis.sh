# shellcheck shell=bash
# Python virtualenv with schemathesis for the REST conformance test (services/deciderserver
# TestSchemathesis), every package pinned in scripts/schemathesis/requirements.txt.
# Source after common.sh.
#
# schemathesis_wanted PKG...  is true when the go test packages include services/deciderserver.
# schemathesis_setup          creates the venv once under
#                             ${SLUICE_CACHE:-$HOME/.cache/sluice}/schemathesis-venv, re-uses
#                             it while the requirements file (and the python3 version) are
#                             unchanged (stamp: requirements.sha256 in the venv), and exports
#                               SLUICE_TEST_SCHEMATHESIS  the venv's schemathesis command
#                             Needs python3 with venv and PyPI; installs python3-venv when root.

# schemathesis_requirements prints the path of scripts/schemathesis/requirements.txt.
schemathesis_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../schemathesis" && pwd)/requirements.txt"; }

# schemathesis_wanted PKG... is true when one of the go package patterns covers services/deciderserver.
schemathesis_wanted() {
  local p
  for p in "$@"; do
    case "$p" in
      ./... | all | ./services/... | ./services/deciderserver | ./services/deciderserver/ | ./services/deciderserver/... | \
        github.com/sluicehq/sluice/... | github.com/sluicehq/sluice/services/... | \
        github.com/sluicehq/sluice/services/deciderserver | github.com/sluicehq/sluice/services/deciderserver/...)
        return 0
        ;;
    esac
  done
  return 1
}

# schemathesis_check VENV: the venv's schemathesis runs.
schemathesis_check() { "$1/bin/schemathesis" --version; }

# schemathesis_setup: see the file comment.
schemathesis_setup() {
  pinned_venv schemathesis "$(schemathesis_requirements)" schemathesis_check
  export SLUICE_TEST_SCHEMATHESIS="$PINNED_VENV/bin/schemathesis"
}
