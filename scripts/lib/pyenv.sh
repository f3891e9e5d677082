# shellcheck shell=bash
# Python virtualenv for the engine interop test (services/interop): the real vLLM and
# SGLang wheels without their dependencies, plus the few packages their KV-event code
# imports, all pinned in scripts/interop/requirements.txt. Source after common.sh.
#
# pyenv_wanted PKG...  is true when the go test packages include services/interop.
# pyenv_setup          creates the venv once under
#                      ${SLUICE_CACHE:-$HOME/.cache/sluice}/interop-venv, re-uses it while
#                      the requirements file (and the python3 version) are unchanged
#                      (stamp: requirements.sha256 in the venv), and exports
#                        SLUICE_TEST_PYTHON  the venv's python
#                      It also compiles SGLang's page-hash C++ extension (the wheel's own
#                      hash_binding.cpp, which SGLang builds through torch) with g++ into
#                      $venv/interop-ext, where services/interop/testdata/stubs.py loads it.
#                      Needs python3 with venv, g++, OpenSSL headers and PyPI; installs the
#                      Debian packages when root.

# pyenv_requirements prints the path of scripts/interop/requirements.txt.
pyenv_requirements() { echo "$(cd "$(dirname "${BASH_SOURCE[0]}")/../interop" && pwd)/requirements.txt"; }

# pyenv_wanted PKG... is true when one of the go package patterns covers services/interop.
pyenv_wanted() {
  local p
  for p in "$@"; do
    case "$p" in
      ./... | all | ./services/... | ./services/interop | ./services/interop/ | ./services/interop/... | \
        github.com/sluicehq/sluice/... | github.com/sluicehq/sluice/services/... | \
        github.com/sluicehq/sluice/services/interop | github.com/sluicehq/sluice/services/interop/...)
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

# pyenv_setup: see the file comment.
pyenv_setup() {
  local req cache venv want stamp t0 lockfd
  t0=$SECONDS
  command -v python3 >/dev/null || apt_install python3 python3-venv
  command -v g++ >/dev/null || apt_install g++
  [[ -f /usr/include/openssl/sha.h ]] || apt_install libssl-dev
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install python3-venv
  fi
  # The sglang 0.5.23 wheels are built for CPython 3.11 to 3.13 only.
  python3 -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' ||
    die "pyenv: need python3 3.11 to 3.13 for the sglang wheel; python3 is $(python3 -V 2>&1)"
  req="$(pyenv_requirements)"
  cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}"
  venv="$cache/interop-venv"
  want="$( (cat "$req" && python3 -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
  stamp="$venv/requirements.sha256"
  mkdir -p "$cache"
  # One build at a time per cache, even with concurrent test.sh runs.
  exec {lockfd}>"$cache/.interop-venv.lock"
  flock "$lockfd"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exec {lockfd}>&-
    export SLUICE_TEST_PYTHON="$venv/bin/python"
    log "pyenv: using cached $venv ($(du -sh "$venv" 2>/dev/null | cut -f1))"
    return 0
  fi
  log "pyenv: creating $venv from $req (vllm and sglang wheels, --no-deps; first run downloads ~380 MB)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$cache/interop-venv.log" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$cache/interop-venv.log"
    die "pyenv: python3 -m venv $venv failed"
  fi
  log "pyenv: pip install --no-deps -r $(basename "$req")"
  if ! "$venv/bin/pip" install --disable-pip-version-check --no-input --no-deps -r "$req" \
    >>"$cache/interop-venv.log" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$cache/interop-venv.log"
    die "pyenv: pip install into $venv failed (log: $cache/interop-venv.log)"
  fi
  if ! "$venv/bin/python" -c 'import msgspec, zmq, pydantic, psutil' >>"$cache/interop-venv.log" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$cache/interop-venv.log"
    die "pyenv: the venv's packages do not import"
  fi
  if ! pyenv_build_hash_ext "$venv" >>"$cache/interop-venv.log" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$cache/interop-venv.log"
    die "pyenv: building SGLang's hash_binding.cpp failed (log: $cache/interop-venv.log)"
  fi
  echo "$want" >"$stamp"
  exec {lockfd}>&-
  export SLUICE_TEST_PYTHON="$venv/bin/python"
  log "pyenv: ready in $((SECONDS - t0))s ($(du -sh "$venv" | cut -f1))"
}
