# shellcheck shell=bash
# Python virtualenv for the engine interop test (tests/interop): the real vLLM and
# SGLang wheels without their dependencies, plus the few packages their KV-event code
# imports, all pinned in scripts/interop/requirements.txt. Source after common.sh.
#
# pyenv_wanted PKG...  is true when the go test packages include tests/interop.
# pyenv_setup          creates the venv once under
#                      ${SLUICE_CACHE:-$HOME/.cache/sluice}/interop-venv, re-uses it while
#                      the requirements file (and the python3 version) are unchanged
#                      (stamp: requirements.sha256 in the venv), and exports
#                        SLUICE_TEST_PYTHON  the venv's python
#                      It also compiles SGLang's page-hash C++ extension (the wheel's own
#                      hash_binding.cpp, which SGLang builds through torch) with g++ into
#                      $venv/interop-ext, where tests/interop/testdata/stubs.py loads it.
#                      Needs python3 with venv, g++, OpenSSL headers and PyPI; installs the
#                      Debian packages when root.

# pyenv_requirements prints the path of scripts/interop/requirements.txt.
pyenv_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../interop" && pwd)/requirements.txt"; }

# pyenv_wanted PKG... is true when one of the go package patterns covers tests/interop.
pyenv_wanted() {
  local p
  for p in "$@"; do
    case "$p" in
      ./... | all | ./tests/... | ./tests/interop | ./tests/interop/ | ./tests/interop/... | \
        github.com/sluicehq/sluice/... | github.com/sluicehq/sluice/tests/... | \
        github.com/sluicehq/sluice/tests/interop | github.com/sluicehq/sluice/tests/interop/...)
        return 0
        ;;
    esac
  done
  return 1
}

# pyenv_build_hash_ext VENV compiles the installed sglang wheel's hash_binding.cpp as SGLang's
# native_hash.py does (same flags, module hicache_hash_cpp) into VENV/interop-ext.
pyenv_build_hash_ext() {
  local venv="$1" py src ext flags=(-O3 -std=c++17 -DNDEBUG)
  py="$venv/bin/python"
  src="$("$py" -c 'import importlib.metadata as m; print(m.distribution("sglang").locate_file("sglang/srt/mem_cache/cpp_utils/hash_binding.cpp"))')"
  ext="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
  if grep -qw avx2 /proc/cpuinfo 2>/dev/null; then flags+=(-mavx2); fi
  mkdir -p "$venv/interop-ext"
  # shellcheck disable=SC2046 # pybind11 --includes prints several -I flags.
  g++ "${flags[@]}" -w -shared -fPIC -DTORCH_EXTENSION_NAME=hicache_hash_cpp \
    $("$py" -m pybind11 --includes) "$src" -o "$venv/interop-ext/hicache_hash_cpp$ext" -lcrypto
}

# pyenv_check VENV: the packages the engines' KV-event code imports are there.
pyenv_check() { "$1/bin/python" -c 'import msgspec, zmq, pydantic, psutil'; }

# pyenv_setup: see the file comment.
pyenv_setup() {
  command -v g++ >/dev/null || apt_install g++
  [[ -f /usr/include/openssl/sha.h ]] || apt_install libssl-dev
  # The sglang 0.5.23 wheels are built for CPython 3.11 to 3.13 only.
  python3 -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' ||
    die "pyenv: need python3 3.11 to 3.13 for the sglang wheel; python3 is $(python3 -V 2>&1)"
  pinned_venv interop "$(pyenv_requirements)" pyenv_check pyenv_build_hash_ext
  export SLUICE_TEST_PYTHON="$PINNED_VENV/bin/python"
}
