# shellcheck shell=bash
# The compose phase of scripts/test.sh: `docker compose up` of the project's own
# docker-compose.yaml on a Docker engine started here, checked through its published loopback
# ports by the TestComposeUp* tests of tests/compose, then `docker compose down -v`.
# Source after common.sh; it defines functions only.
#
# No image registry is reachable on the development machines, so the images the compose file
# names by default (postgres:16, apache/kafka:4.1.0, golang:1.26, alpine:3.22) are replaced,
# through the variables the compose file reads, by stand-ins built here without the network:
#   sluice-standin/base     Debian bookworm (debootstrap --variant=minbase from the apt mirror)
#                           with PostgreSQL 15, a JRE and wget; `docker import`ed
#   sluice-standin/postgres deploy/compose/standins/postgres on that base
#   sluice-standin/kafka    deploy/compose/standins/kafka on that base, with the broker jars
#                           scripts/lib/kafka.sh caches from Maven Central
#   sluice:compose-smoke    the Dockerfile's `prebuilt` target around a binary built on the host
# Each stand-in carries a label with the hash of its inputs and is rebuilt only when they change.
# Compose v2 (Debian ships only v1, which rejects the top-level `name:`) is built once from the
# Go module proxy. Everything is cached under ${SLUICE_CACHE:-~/.cache/sluice}/compose:
#   docker/                  dockerd's data root (the images above)
#   compose-<version>/       the docker-compose binary
# One dockerd at a time per cache (flock): a second test.sh waits for the first's phase to end.
#
# compose_phase ROOT   the whole phase; sets COMPOSE_TIMES (a one-line summary)
# compose_teardown     `down -v` and stop dockerd if compose_phase started them (EXIT trap)

COMPOSE_V2_VERSION="${SLUICE_COMPOSE_V2_VERSION:-v2.28.1}"
# Bump to rebuild every stand-in (a change of how this file builds them).
COMPOSE_STANDIN_REV=1
COMPOSE_BASE_PACKAGES="wget,postgresql-15,openjdk-17-jre-headless"
COMPOSE_PROJECT="sluice-smoke"

COMPOSE_DIR=""      # this run's temp dir (dockerd socket, logs, build contexts)
COMPOSE_DOCKERD_PID=""
COMPOSE_UP=0        # 1 once `up` ran: teardown runs `down -v`
COMPOSE_LOCKFD=""
COMPOSE_TIMES=""
COMPOSE_BIN=""
COMPOSE_PREFETCH_T0=0
COMPOSE_NET_BEFORE="" # "ip_forward FORWARD-policy" before dockerd started

_compose_cache() { echo "${SLUICE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sluice}/compose"; }

# _docker runs the Debian docker CLI against this phase's daemon.
_docker() { DOCKER_HOST="unix://$COMPOSE_DIR/docker.sock" /usr/bin/docker "$@"; }

# _compose runs Compose v2 on the project's file plus the smoke-test override.
_compose() {
  DOCKER_HOST="unix://$COMPOSE_DIR/docker.sock" "$COMPOSE_BIN" -p "$COMPOSE_PROJECT" \
    -f "$COMPOSE_ROOT/docker-compose.yaml" -f "$COMPOSE_ROOT/deploy/compose/smoke.yaml" "$@"
}

# compose_tools installs the Debian packages the phase needs when missing.
compose_tools() {
  local want=()
  [[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || want+=(docker.io)
  command -v debootstrap >/dev/null || want+=(debootstrap)
  command -v iptables >/dev/null || want+=(iptables)
  ((${#want[@]} == 0)) || apt_install "${want[@]}"
}

# compose_v2_path sets COMPOSE_BIN, the cached Compose v2 binary; true when it is there.
compose_v2_path() {
  COMPOSE_BIN="$(_compose_cache)/compose-$COMPOSE_V2_VERSION/docker-compose"
  [[ -x "$COMPOSE_BIN" ]] && "$COMPOSE_BIN" version >/dev/null 2>&1
}

# compose_v2 builds (once per version) the Compose v2 binary; sets COMPOSE_BIN.
compose_v2() {
  local dir t0=$SECONDS tmp
  if compose_v2_path; then
    log "compose: using cached Compose $COMPOSE_V2_VERSION ($COMPOSE_BIN)"
    return 0
  fi
  dir="$(dirname "$COMPOSE_BIN")"
  log "compose: building Compose $COMPOSE_V2_VERSION from the Go module proxy (once; several minutes)"
  mkdir -p "$dir"
  rm -rf "$dir"/gobin.* # an interrupted build's (the phase lock is held)
  tmp="$(mktemp -d "$dir/gobin.XXXXXX")"
  # Outside the repository so its go.mod plays no part; the version stamped as a release does.
  if ! (cd "$tmp" && GOBIN="$tmp" GOFLAGS=-mod=mod CGO_ENABLED=0 go install \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_V2_VERSION" \
    "github.com/docker/compose/v2/cmd@$COMPOSE_V2_VERSION") >"$dir/build.log" 2>&1; then
    show_log_tail "$dir/build.log" 40
    rm -rf "$tmp"
    die "compose: go install github.com/docker/compose/v2/cmd@$COMPOSE_V2_VERSION failed (log: $dir/build.log)"
  fi
  mv "$tmp/cmd" "$COMPOSE_BIN"
  rm -rf "$tmp"
  log "compose: built $("$COMPOSE_BIN" version) in $((SECONDS - t0))s"
}

# --- the one-time builds, in the background from the start of scripts/test.sh --------------
# compose_prefetch does what needs neither dockerd nor the phase lock and is slow only the first
# time: the Debian packages (docker.io, debootstrap, iptables), Compose v2 (a Go build from the
# module proxy, in the shared Go module and build caches) and the stand-ins' Debian root file
# system (debootstrap, its .debs kept in compose/debs/, the result a tarball
# compose/base-<inputs>.tar that the phase `docker import`s). The two builds run side by side
# (one is CPU-bound, the other mostly network and dpkg). Under compose/.build.lock, so two runs
# do not build the same thing at once.
#
# compose_prefetch_start  runs it in the background at a low CPU and the idle I/O priority (test.sh
#                         calls it first thing, so it overlaps the main run); nothing when cached
# compose_prefetch_wait   joins it, or runs it in the foreground when it was not started
COMPOSE_PREFETCH_PID=""
COMPOSE_PREFETCH_DIR=""

# compose_prefetch_cached is true when compose_prefetch has nothing to do.
compose_prefetch_cached() {
  [[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] && command -v debootstrap >/dev/null &&
    command -v iptables >/dev/null && compose_v2_path && _compose_base_ready
}

compose_prefetch() {
  local t0=$SECONDS cache lockfd rc=0 v2pid
  cache="$(_compose_cache)"
  compose_tools
  mkdir -p "$cache"
  exec {lockfd}>"$cache/.build.lock"
  if ! flock -n "$lockfd"; then
    log "compose: another run is doing the one-time builds in $cache; waiting for it (up to 60 min)"
    flock -w 3600 "$lockfd" || die "compose: $cache/.build.lock still held after 60 min"
  fi
  compose_v2 &
  v2pid=$!
  (compose_base_rootfs) || rc=$?
  wait "$v2pid" || rc=$?
  exec {lockfd}>&-
  ((rc == 0)) || die "compose: the one-time builds failed (above)"
  log "compose: one-time builds done in $((SECONDS - t0))s"
}

compose_prefetch_start() {
  if compose_prefetch_cached; then
    log "compose: one-time builds (Compose $COMPOSE_V2_VERSION, stand-in base) are cached"
    return 0
  fi
  is_root || return 0 # compose_phase says why it cannot run
  COMPOSE_PREFETCH_DIR="$(mktemp -d "${TMPDIR:-/tmp}/sluice-compose-prefetch.XXXXXX")"
  # nice 10, not 19: the race run leaves the CPU idle often, but a 2-core machine shared with
  # other work is rarely idle, and at 19 the build would get almost nothing until the end.
  local prio="${SLUICE_TEST_COMPOSE_NICE:-10}"
  log "compose: one-time builds in the background at nice $prio (log: $COMPOSE_PREFETCH_DIR/prefetch.log)"
  # Its own session and process group (id in pgid), so teardown stops go and debootstrap too.
  # shellcheck disable=SC2016 # expanded by the inner bash
  nice -n "$prio" ionice -c 3 setsid --wait bash -c 'set -euo pipefail
    echo "$$" >"$2/pgid"
    source "$1/common.sh"; source "$1/compose.sh"
    compose_prefetch' \
    compose-prefetch "$(dirname "${BASH_SOURCE[0]}")" "$COMPOSE_PREFETCH_DIR" \
    >"$COMPOSE_PREFETCH_DIR/prefetch.log" 2>&1 </dev/null &
  COMPOSE_PREFETCH_PID=$!
  COMPOSE_PREFETCH_T0=$SECONDS
}

compose_prefetch_wait() {
  if [[ -z "$COMPOSE_PREFETCH_PID" ]]; then
    compose_prefetch_cached || compose_prefetch
    return 0
  fi
  local rc=0 t0=$SECONDS
  pid_alive "$COMPOSE_PREFETCH_PID" &&
    log "compose: waiting for the background one-time builds (started $((SECONDS - COMPOSE_PREFETCH_T0))s ago; log: $COMPOSE_PREFETCH_DIR/prefetch.log)"
  wait "$COMPOSE_PREFETCH_PID" || rc=$?
  COMPOSE_PREFETCH_PID=""
  sed 's/^/  [background] /' "$COMPOSE_PREFETCH_DIR/prefetch.log" >&2
  ((rc == 0)) || die "compose: the background one-time builds failed (exit $rc; above)"
  log "compose: background one-time builds finished; the phase waited $((SECONDS - t0))s for them"
  rm -rf "$COMPOSE_PREFETCH_DIR"
  COMPOSE_PREFETCH_DIR=""
}

# compose_prefetch_stop stops the background builds (test.sh's EXIT trap); they start over next time.
compose_prefetch_stop() {
  if [[ -n "$COMPOSE_PREFETCH_PID" ]] && pid_alive "$COMPOSE_PREFETCH_PID"; then
    log "compose: stopping the background one-time builds (they start over next time)"
    kill -TERM -- "-$(cat "$COMPOSE_PREFETCH_DIR/pgid" 2>/dev/null || echo "$COMPOSE_PREFETCH_PID")" 2>/dev/null
    wait "$COMPOSE_PREFETCH_PID" 2>/dev/null
  fi
  COMPOSE_PREFETCH_PID=""
  [[ -z "$COMPOSE_PREFETCH_DIR" ]] || rm -rf "$COMPOSE_PREFETCH_DIR"
  COMPOSE_PREFETCH_DIR=""
}

# _compose_lock takes the cache's lock: one compose phase (dockerd, builds) at a time.
_compose_lock() {
  local cache
  cache="$(_compose_cache)"
  mkdir -p "$cache"
  exec {COMPOSE_LOCKFD}>"$cache/.phase.lock"
  if ! flock -n "$COMPOSE_LOCKFD"; then
    log "compose: another test run's compose phase holds $cache; waiting for it (up to 30 min)"
    flock -w 1800 "$COMPOSE_LOCKFD" || die "compose: $cache/.phase.lock still held after 30 min"
  fi
}

# compose_dockerd starts dockerd on a socket of this run, its data root in the cache.
compose_dockerd() {
  local cache data t0=$SECONDS
  cache="$(_compose_cache)"
  data="$cache/docker"
  mkdir -p "$data"
  # A daemon left by a killed run (same data root) would refuse to share it.
  if [[ -f "$data/dockerd.pid" ]] && pid_alive "$(cat "$data/dockerd.pid")"; then
    log "compose: stopping a dockerd left by an earlier run (pid $(cat "$data/dockerd.pid"))"
    stop_pid "$(cat "$data/dockerd.pid")" dockerd 30
  fi
  local other
  if other="$(pgrep -x dockerd)"; then
    die "compose: another dockerd runs (pid ${other//$'\n'/ }): its bridge and iptables rules would clash with the one this phase starts; stop it, or skip the phase locally with SLUICE_TEST_NO_COMPOSE=1"
  fi
  # dockerd turns on IP forwarding and, when it does, sets the FORWARD policy to DROP, and
  # leaves both (and docker0) behind when it stops; compose_stop_dockerd puts them back, so
  # other tests on this machine (network namespaces routed through the host) are not affected.
  COMPOSE_NET_BEFORE="$(sysctl -n net.ipv4.ip_forward 2>/dev/null) $(iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3}')"
  log "compose: starting dockerd (data root $data, log $COMPOSE_DIR/dockerd.log)"
  # setsid: Ctrl-C goes to test.sh, whose trap stops the stack and then the daemon in order.
  setsid /usr/sbin/dockerd --data-root "$data" --exec-root "$COMPOSE_DIR/exec" \
    --pidfile "$data/dockerd.pid" -H "unix://$COMPOSE_DIR/docker.sock" \
    --log-level warn </dev/null >"$COMPOSE_DIR/dockerd.log" 2>&1 &
  COMPOSE_DOCKERD_PID=$!
  local deadline=$((SECONDS + 60))
  until _docker version >/dev/null 2>&1; do
    if ! pid_alive "$COMPOSE_DOCKERD_PID"; then
      show_log_tail "$COMPOSE_DIR/dockerd.log"
      die "compose: dockerd exited during start-up"
    fi
    ((SECONDS < deadline)) || { show_log_tail "$COMPOSE_DIR/dockerd.log"; die "compose: dockerd not answering after 60s"; }
    sleep 0.5
  done
  log "compose: dockerd $(_docker version -f '{{.Server.Version}}') up in $((SECONDS - t0))s ($(_docker info -f '{{.Driver}}, cgroup {{.CgroupVersion}}'))"
}

# _image_label IMAGE prints the sluice.inputs label of IMAGE, or nothing when it is absent.
_image_label() { _docker image inspect -f '{{index .Config.Labels "sluice.inputs"}}' "$1" 2>/dev/null || true; }

# _apt_mirror prints the Debian mirror of the host's apt sources (default deb.debian.org).
_apt_mirror() {
  local m
  m="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p' | head -n1)"
  [[ -n "$m" ]] || m="$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n1)"
  echo "${m:-http://deb.debian.org/debian}"
}

# _compose_base_inputs prints the hash of what the stand-in base is made from.
_compose_base_inputs() {
  printf 'rev=%s suite=bookworm mirror=%s packages=%s' "$COMPOSE_STANDIN_REV" "$(_apt_mirror)" "$COMPOSE_BASE_PACKAGES" | sha256sum | cut -c1-16
}

# _compose_base_ready is true when the base needs no debootstrap: its tarball is waiting to be
# imported, or the image with these inputs was imported (compose/base.imported; compose_base
# checks the image itself and builds the tarball again if the data root lost it).
_compose_base_ready() {
  local cache want
  cache="$(_compose_cache)"
  want="$(_compose_base_inputs)"
  [[ -f "$cache/base-$want.tar" || "$(cat "$cache/base.imported" 2>/dev/null)" == "$want" ]]
}

# compose_base_rootfs makes compose/base-<inputs>.tar, the stand-ins' Debian root file system:
# debootstrap --variant=minbase from the host's apt mirror, the downloaded .debs kept in
# compose/debs/ for the next time the inputs change. Needs no dockerd.
compose_base_rootfs() {
  local cache want mirror root t0=$SECONDS
  _compose_base_ready && return 0
  cache="$(_compose_cache)"
  want="$(_compose_base_inputs)"
  mirror="$(_apt_mirror)"
  mkdir -p "$cache/debs"
  rm -rf "$cache"/rootfs.* "$cache"/base-*.tar.tmp # an interrupted build's (the build lock is held)
  root="$(mktemp -d "$cache/rootfs.XXXXXX")"
  log "compose: debootstrap --variant=minbase bookworm from $mirror with $COMPOSE_BASE_PACKAGES (once; a few minutes; log: $cache/debootstrap.log)"
  if ! debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$COMPOSE_BASE_PACKAGES" \
    bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    show_log_tail "$cache/debootstrap.log"
    rm -rf "$root"
    die "compose: debootstrap failed (log above: $cache/debootstrap.log)"
  fi
  # Package caches, documentation and the cluster the postgresql package created are not part
  # of the image.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/var/lib/postgresql/15 "$root"/etc/postgresql/15
  tar -C "$root" -cf "$cache/base-$want.tar.tmp" .
  rm -rf "$root" "$cache"/base-*.tar
  mv "$cache/base-$want.tar.tmp" "$cache/base-$want.tar"
  log "compose: stand-in base root file system ready in $((SECONDS - t0))s ($(du -sh "$cache/base-$want.tar" | cut -f1))"
}

# compose_base imports sluice-standin/base:bookworm from compose_base_rootfs's tarball, once.
compose_base() {
  local cache want t0=$SECONDS
  cache="$(_compose_cache)"
  want="$(_compose_base_inputs)"
  if [[ "$(_image_label sluice-standin/base:bookworm)" == "$want" ]]; then
    log "compose: using cached sluice-standin/base:bookworm"
    echo "$want" >"$cache/base.imported" # so compose_prefetch skips debootstrap next time
    rm -f "$cache/base-$want.tar"
    return 0
  fi
  [[ -f "$cache/base-$want.tar" ]] || { rm -f "$cache/base.imported"; compose_base_rootfs; }
  log "compose: importing the stand-in base"
  _docker import \
    --change "LABEL sluice.inputs=$want" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - sluice-standin/base:bookworm <"$cache/base-$want.tar" >/dev/null
  # The image is the copy from now on (compose_base builds the tarball again if it goes).
  echo "$want" >"$cache/base.imported"
  rm -f "$cache/base-$want.tar"
  log "compose: sluice-standin/base:bookworm imported in $((SECONDS - t0))s"
}

# _standin NAME CONTEXT EXTRA_INPUT builds sluice-standin/NAME from CONTEXT on the base unless
# an image with the same inputs exists.
_standin() {
  local name="$1" ctx="$2" extra="$3" want base t0=$SECONDS
  base="$(_docker image inspect -f '{{.Id}}' sluice-standin/base:bookworm)"
  want="$( (cd "$ctx" && find . -type f -not -path './libs/*' -print0 | sort -z | xargs -0 sha256sum; echo "$base $extra") | sha256sum | cut -c1-16)"
  if [[ "$(_image_label "sluice-standin/$name:local")" == "$want" ]]; then
    log "compose: using cached sluice-standin/$name:local"
    return 0
  fi
  log "compose: building sluice-standin/$name:local"
  if ! DOCKER_BUILDKIT=1 _docker build -q --label "sluice.inputs=$want" \
    --build-arg BASE_IMAGE=sluice-standin/base:bookworm -t "sluice-standin/$name:local" "$ctx" \
    >"$COMPOSE_DIR/build-$name.log" 2>&1; then
    show_log_tail "$COMPOSE_DIR/build-$name.log"
    die "compose: building the $name stand-in failed"
  fi
  log "compose: sluice-standin/$name:local built in $((SECONDS - t0))s"
}

# compose_images builds what the stack runs: the stand-ins and the sluice image.
compose_images() {
  local root="$1" ctx t0
  compose_base
  _standin postgres "$root/deploy/compose/standins/postgres" ""
  kafka_provision # the broker jars (KAFKA_LIBS), cached by scripts/lib/kafka.sh
  ctx="$COMPOSE_DIR/kafka-ctx"
  cp -r "$root/deploy/compose/standins/kafka" "$ctx"
  cp -r "$KAFKA_LIBS" "$ctx/libs"
  _standin kafka "$ctx" "$(sha256sum "$(kafka_pom)" | cut -d' ' -f1)"

  t0=$SECONDS
  ctx="$COMPOSE_DIR/sluice-ctx"
  _compose_gobuild_wait
  if ! DOCKER_BUILDKIT=1 _docker build -q --target prebuilt \
    --build-arg RUNTIME_IMAGE=sluice-standin/base:bookworm \
    -f "$root/Dockerfile" -t sluice:compose-smoke "$ctx" >"$COMPOSE_DIR/build-sluice.log" 2>&1; then
    show_log_tail "$COMPOSE_DIR/build-sluice.log"
    die "compose: building the sluice image (Dockerfile target prebuilt) failed"
  fi
  log "compose: sluice:compose-smoke (host-built binary) ready in $((SECONDS - t0))s"
  # Images of earlier runs' sluice builds, now untagged, and the build cache (the stand-ins are
  # skipped by their labels, not by it), so the data root does not grow run by run.
  _docker image prune -f >/dev/null 2>&1 || true
  _docker builder prune -af >/dev/null 2>&1 || true
}

# _compose_gobuild ROOT builds, in the background, the sluice binary the image packages (into the
# build context) and the tests/compose test binary the checks run. Plain `go build`, as the e2e
# tests build it, so a full run compiles it once for both (the Go build cache); not static, which
# is fine on the stand-in base: the same Debian release as this machine, so the same glibc.
# _compose_gobuild_wait joins it.
COMPOSE_GOBUILD_PID=""
_compose_gobuild() {
  local root="$1" ctx="$COMPOSE_DIR/sluice-ctx"
  mkdir -p "$ctx/examples"
  cp "$root/examples/sluice.yaml" "$ctx/examples/"
  (
    cd "$root" &&
      go build -o "$ctx/sluice" ./services/sluice &&
      go test -c -o "$COMPOSE_DIR/compose.test" ./tests/compose
  ) >"$COMPOSE_DIR/gobuild.log" 2>&1 &
  COMPOSE_GOBUILD_PID=$!
}

_compose_gobuild_wait() {
  [[ -n "$COMPOSE_GOBUILD_PID" ]] || return 0
  local rc=0
  wait "$COMPOSE_GOBUILD_PID" || rc=$?
  COMPOSE_GOBUILD_PID=""
  if ((rc != 0)); then
    cat "$COMPOSE_DIR/gobuild.log" >&2
    die "compose: go build ./services/sluice or go test -c ./tests/compose failed (above)"
  fi
}

# compose_phase ROOT: see the file comment.
compose_phase() {
  COMPOSE_ROOT="$1"
  local t0=$SECONDS t_setup t_up t_checks t_down ports
  COMPOSE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/sluice-compose.XXXXXX")"
  is_root || die "compose: the compose phase starts dockerd and needs root (SLUICE_TEST_NO_COMPOSE=1 skips it locally)"
  _compose_gobuild "$COMPOSE_ROOT"
  compose_prefetch_wait
  compose_v2_path || die "compose: no Compose v2 binary at $COMPOSE_BIN"
  log "compose: $("$COMPOSE_BIN" version)"
  _compose_lock
  compose_dockerd
  compose_images "$COMPOSE_ROOT"
  t_setup=$((SECONDS - t0))

  # Host ports for the smoke override: free loopback ports, so a developer's own stack on
  # 8080/7070/... is not in the way.
  mapfile -t ports < <(free_ports 8)
  export SLUICE_IMAGE=sluice:compose-smoke
  export SLUICE_RUNTIME_IMAGE=sluice-standin/base:bookworm
  export SLUICE_POSTGRES_IMAGE=sluice-standin/postgres:local
  export SLUICE_KAFKA_IMAGE=sluice-standin/kafka:local
  export SLUICE_SMOKE_GATEWAY_PORT="${ports[0]}" SLUICE_SMOKE_DECIDER1_GRPC_PORT="${ports[1]}" \
    SLUICE_SMOKE_DECIDER1_HTTP_PORT="${ports[2]}" SLUICE_SMOKE_DECIDER2_GRPC_PORT="${ports[3]}" \
    SLUICE_SMOKE_DECIDER2_HTTP_PORT="${ports[4]}" SLUICE_SMOKE_KAFKA_PORT="${ports[5]}" \
    SLUICE_SMOKE_SIM_PLAIN_1_PORT="${ports[6]}" SLUICE_SMOKE_SIM_PLAIN_2_PORT="${ports[7]}"
  # A stack left by a killed run.
  _compose down -v --remove-orphans >/dev/null 2>&1 || true

  log "compose: docker compose up -d --wait (11 services)"
  local tu=$SECONDS tu_epoch
  tu_epoch=$(date +%s)
  COMPOSE_UP=1
  if ! _compose up -d --wait --wait-timeout 180 --no-build --pull never >"$COMPOSE_DIR/up.log" 2>&1; then
    cat "$COMPOSE_DIR/up.log" >&2
    _compose ps -a >&2 || true
    _compose logs --no-color --tail 40 >&2 || true
    die "compose: docker compose up did not bring every service up healthy"
  fi
  t_up=$((SECONDS - tu))
  log "compose: every service healthy ${t_up}s after up; first healthy, seconds after up: $(_compose_healthy_times "$tu_epoch")"
  _compose ps --format 'table {{.Service}}\t{{.Status}}' >&2 || true

  # Built without -race: the code under test runs in the containers; this is only its client.
  log "compose: checks: go test -count=1 -v -run '^TestComposeUp' ./tests/compose (built beforehand)"
  local tc=$SECONDS rc=0
  SLUICE_TEST_COMPOSE_UP=1 \
    SLUICE_TEST_COMPOSE_CMD="$COMPOSE_BIN" COMPOSE_PROJECT_NAME="$COMPOSE_PROJECT" \
    COMPOSE_FILE="$COMPOSE_ROOT/docker-compose.yaml:$COMPOSE_ROOT/deploy/compose/smoke.yaml" \
    DOCKER_HOST="unix://$COMPOSE_DIR/docker.sock" SLUICE_TEST_COMPOSE_ADMIN_TOKEN="${SLUICE_ADMIN_TOKEN:-sluice-dev-admin}" \
    SLUICE_TEST_COMPOSE_SLUICE="$COMPOSE_DIR/sluice-ctx/sluice" \
    bash -c 'cd "$1/tests/compose" && exec "$2" "${@:3}"' checks "$COMPOSE_ROOT" "$COMPOSE_DIR/compose.test" \
    -test.count=1 -test.v -test.timeout 10m -test.run '^TestComposeUp' || rc=$?
  t_checks=$((SECONDS - tc))
  if ((rc != 0)); then
    _compose ps -a >&2 || true
    _compose logs --no-color --tail 60 >&2 || true
    die "compose: the checks against the running stack failed (above)"
  fi

  local td=$SECONDS left
  log "compose: docker compose down -v"
  _compose down -v --remove-orphans --timeout 20 >"$COMPOSE_DIR/down.log" 2>&1 || { cat "$COMPOSE_DIR/down.log" >&2; die "compose: down -v failed"; }
  COMPOSE_UP=0
  left="$(_docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT"; \
    _docker volume ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT"; \
    _docker network ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT")"
  [[ -z "$left" ]] || die "compose: down -v left containers, volumes or networks behind: $left"
  [[ -z "$(_docker ps -q)" ]] || die "compose: containers still running after down -v: $(_docker ps --format '{{.Names}}')"
  t_down=$((SECONDS - td))
  log "compose: down -v left no container, volume or network"
  compose_stop_dockerd
  COMPOSE_TIMES="setup ${t_setup}s, up to healthy ${t_up}s, checks ${t_checks}s, down ${t_down}s, phase $((SECONDS - t0))s"
  log "compose: $COMPOSE_TIMES"
  rm -rf "$COMPOSE_DIR"
  COMPOSE_DIR=""
}

# _compose_healthy_times SINCE prints, for each container that turned healthy since the epoch
# second SINCE, how many seconds after SINCE it first did (from the daemon's event log).
_compose_healthy_times() {
  # --until a second ahead: the last health event can carry the current second.
  _docker events --since "$1" --until "$(($(date +%s) + 1))" --filter event=health_status \
    --format '{{.TimeNano}} {{index .Actor.Attributes "com.docker.compose.service"}} {{.Status}}' 2>/dev/null |
    awk -v since="$1" '$NF == "healthy" && !($2 in seen) {
      seen[$2] = 1; printf "%s%s %.0f", sep, $2, $1 / 1e9 - since; sep = ", " }'
}

# compose_stop_dockerd stops the daemon compose_phase started and releases the cache lock.
compose_stop_dockerd() {
  if [[ -n "$COMPOSE_DOCKERD_PID" ]] && pid_alive "$COMPOSE_DOCKERD_PID"; then
    stop_pid "$COMPOSE_DOCKERD_PID" dockerd 30
  fi
  COMPOSE_DOCKERD_PID=""
  if [[ -n "$COMPOSE_NET_BEFORE" ]]; then
    local fwd policy
    read -r fwd policy <<<"$COMPOSE_NET_BEFORE"
    [[ -z "$policy" ]] || iptables -P FORWARD "$policy" 2>/dev/null || true
    [[ -z "$fwd" ]] || sysctl -qw "net.ipv4.ip_forward=$fwd" 2>/dev/null || true
    ip link delete docker0 2>/dev/null || true
    COMPOSE_NET_BEFORE=""
  fi
  if [[ -n "$COMPOSE_LOCKFD" ]]; then
    exec {COMPOSE_LOCKFD}>&-
    COMPOSE_LOCKFD=""
  fi
}

# compose_teardown: see the file comment. Safe to call when the phase never ran.
compose_teardown() {
  compose_prefetch_stop
  [[ -n "$COMPOSE_DIR" ]] || return 0
  if [[ -n "$COMPOSE_GOBUILD_PID" ]] && pid_alive "$COMPOSE_GOBUILD_PID"; then
    kill -TERM "$COMPOSE_GOBUILD_PID" 2>/dev/null
    wait "$COMPOSE_GOBUILD_PID" 2>/dev/null
  fi
  if ((COMPOSE_UP)) && [[ -n "$COMPOSE_DOCKERD_PID" ]] && pid_alive "$COMPOSE_DOCKERD_PID"; then
    log "compose: docker compose down -v (cleanup)"
    _compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
  fi
  compose_stop_dockerd
  if [[ "${SLUICE_TEST_KEEP:-}" == 1 ]]; then
    log "compose: kept $COMPOSE_DIR (SLUICE_TEST_KEEP=1)"
  else
    rm -rf "$COMPOSE_DIR"
  fi
  COMPOSE_DIR=""
}

# compose_wanted FULL_RUN is true when the compose phase should run: in a full run (no
# arguments) or with SLUICE_TEST_COMPOSE=1, unless SLUICE_TEST_NO_COMPOSE=1 (refused in CI).
compose_wanted() {
  if [[ "${SLUICE_TEST_NO_COMPOSE:-}" == 1 ]]; then
    is_ci && die "SLUICE_TEST_NO_COMPOSE=1 is not allowed in CI: the compose phase must run"
    log "SLUICE_TEST_NO_COMPOSE=1: skipping the compose phase"
    return 1
  fi
  [[ "$1" == 1 || "${SLUICE_TEST_COMPOSE:-}" == 1 ]]
}
