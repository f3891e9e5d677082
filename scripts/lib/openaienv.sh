# shellcheck shell=bash
# Python virtualenv with the official openai package for the OpenAI-compatibility test
# (tests/interop TestOpenAIClient), every package pinned in scripts/openai/requirements.txt.
# Source after common.sh.
#
# openaienv_wanted PKG...  is true when the go test packages include tests/interop.
# openaienv_setup          creates the venv once under
#                          ${SLUICE_CACHE:-$HOME/.cache/sluice}/openai-venv, re-uses it while
#                          the requirements file (and the python3 version) are unchanged
#                          (stamp: requirements.sha256 in the venv), and exports
#                            SLUICE_TEST_OPENAI_PYTHON  the venv's python
#                          Needs python3 with venv and PyPI; installs python3-venv when root.

# openaienv_requirements prints the path of scripts/openai/requirements.txt.
openaienv_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../openai" && pwd)/requirements.txt"; }

# openaienv_wanted PKG... is true when one of the go package patterns covers tests/interop.
openaienv_wanted() { pyenv_wanted "$@"; }

# openaienv_check VENV: the venv's openai imports.
openaienv_check() { "$1/bin/python" -c 'import openai; print("openai", openai.__version__)'; }

# openaienv_setup: see the file comment.
openaienv_setup() {
  pinned_venv openai "$(openaienv_requirements)" openaienv_check
  export SLUICE_TEST_OPENAI_PYTHON="$PINNED_VENV/bin/python"
}
