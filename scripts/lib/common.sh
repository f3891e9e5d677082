# shellcheck shell=bash
# Shared helpers for scripts/test.sh and the service start/stop scripts.
# Source it; it defines functions only and changes no shell options.

# log prints a timestamped progress line to stderr.
log() { printf '[test.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# die prints an error and exits non-zero.
die() { printf '[test.sh] ERROR: %s\n' "$*" >&2; exit 1; }

# is_ci is true when running under CI (CI set to anything but "", "0", "false").
is_ci() { case "${CI:-}" in "" | 0 | false | FALSE | False) return 1 ;; *) return 0 ;; esac; }

# is_root is true when running as uid 0.
is_root() { [[ "$(id -u)" == 0 ]]; }

_apt_updated=0
# apt_install installs Debian packages (root only), running apt-get update once.
apt_install() {
  is_root || die "need Debian packages '$*' but not root: install them yourself"
  command -v apt-get >/dev/null || die "need packages '$*' and apt-get is missing"
  # One apt-get at a time: test.sh's background jobs (the compose phase's one-time builds)
  # install packages while the foreground may too, and apt-get fails on a held lock.
  local lockfd
  exec {lockfd}>/tmp/sluice-apt.lock
  if ! flock -n "$lockfd"; then
    log "apt: waiting for another sluice apt-get (/tmp/sluice-apt.lock)"
    flock -w 1800 "$lockfd" || die "apt: /tmp/sluice-apt.lock still held after 30 min"
  fi
  if [[ "$_apt_updated" == 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    _apt_updated=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
  exec {lockfd}>&-
}

# free_ports N prints N distinct currently-free loopback TCP ports, one a line.
# The kernel picks them (bind to port 0), all sockets held open together so the
# ports differ; a small race with other processes remains, as with any such scheme.
free_ports() {
  local n="$1"
  if command -v python3 >/dev/null; then
    python3 - "$n" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PY
    return
  fi
  # Fallback: probe random high ports with bash's /dev/tcp (refused = free).
  local got=() p
  while ((${#got[@]} < n)); do
    p=$((20000 + RANDOM % 30000))
    [[ " ${got[*]} " == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then got+=("$p"); fi
  done
  printf '%s\n' "${got[@]}"
}

# port_open HOST PORT is true when a TCP connect to HOST:PORT succeeds.
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# pid_alive PID is true while process PID exists and is not a zombie.
pid_alive() {
  [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null || return 1
  local st=""
  [[ -r "/proc/$1/stat" ]] && st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1 || true)"
  [[ "$st" != Z ]]
}

# stop_pid PID NAME [GRACE_SECONDS] sends SIGTERM, waits, then SIGKILLs.
stop_pid() {
  local pid="$1" name="$2" grace="${3:-30}" i
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) ignored SIGTERM for ${grace}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# show_log_tail FILE [LINES] prints the end of a service log to stderr.
show_log_tail() {
  local f="$1" n="${2:-60}"
  [[ -f "$f" ]] || { printf '(no log file %s)\n' "$f" >&2; return 0; }
  printf -- '----- last %s lines of %s -----\n' "$n" "$f" >&2
  tail -n "$n" "$f" >&2
  printf -- '----- end of %s -----\n' "$f" >&2
}

# pinned_venv NAME REQUIREMENTS CHECK [BUILD] creates, once, the Python venv
# ${SLUICE_CACHE:-~/.cache/sluice}/NAME-venv with every package of REQUIREMENTS installed
# --no-deps (the file pins them all, so nothing unpinned comes along), runs the function
# CHECK VENV (and BUILD VENV, when given, for extra build steps) with output in NAME-venv.log,
# and stamps the venv with a hash of the requirements file and the python3 version. While the
# stamp matches, later calls reuse it. One build at a time per cache (flock), even with
# concurrent test.sh runs. Sets PINNED_VENV to the venv's path; dies with the log's tail on
# failure. Installs python3-venv when root and missing.
pinned_venv() {
  local name="$1" req="$2" check="$3" build="${4:-}" cache venv logf want stamp lockfd t0=$SECONDS
  command -v python3 >/dev/null || apt_install python3 python3-venv
  python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}"
  venv="$cache/$name-venv"
  logf="$cache/$name-venv.log"
  want="$( (cat "$req" && python3 -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
  stamp="$venv/requirements.sha256"
  mkdir -p "$cache"
  exec {lockfd}>"$cache/.$name-venv.lock"
  flock "$lockfd"
  # shellcheck disable=SC2034 # read by the callers
  PINNED_VENV="$venv"
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exec {lockfd}>&-
    log "$name: using cached $venv ($(du -sh "$venv" 2>/dev/null | cut -f1))"
    return 0
  fi
  log "$name: creating $venv from $req (pip install --no-deps; the first run downloads from PyPI)"
  rm -rf "$venv"
  _pinned_venv_step python3 -m venv "$venv"
  _pinned_venv_step "$venv/bin/pip" install --disable-pip-version-check --no-input --no-deps -r "$req"
  _pinned_venv_step "$check" "$venv"
  [[ -z "$build" ]] || _pinned_venv_step "$build" "$venv"
  echo "$want" >"$stamp"
  exec {lockfd}>&-
  log "$name: ready in $((SECONDS - t0))s ($(du -sh "$venv" | cut -f1))"
}

# _pinned_venv_step CMD... runs one build step of pinned_venv (whose name, logf and lockfd it
# sees), its output appended to the log; on failure it releases the lock and dies.
_pinned_venv_step() {
  if ! "$@" >>"$logf" 2>&1; then
    exec {lockfd}>&-
    show_log_tail "$logf"
    die "$name: '$*' failed (log: $logf)"
  fi
}
