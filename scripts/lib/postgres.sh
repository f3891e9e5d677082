# shellcheck shell=bash
# Throwaway PostgreSQL cluster for the integration tests. Source after common.sh.
#
# pg_setup DIR   provisions binaries if needed, initdb's a cluster under DIR/pg,
#                starts it on a free loopback port and exports:
#                  DATABASE_URL             postgres://sluice@127.0.0.1:PORT/sluice_test?sslmode=disable
#                  SLUICE_TEST_PG_BIN       directory of initdb/pg_ctl
#                  SLUICE_TEST_PG_USER      OS user that owns and runs the cluster
#                  SLUICE_TEST_PG_DATADIR   data directory (pg_ctl -D)
#                  SLUICE_TEST_PG_PORT      TCP port on 127.0.0.1
#                  SLUICE_TEST_PG_LOG       server log file
#                postgres-stop.sh / postgres-start.sh stop and restart it from these.
# pg_teardown    stops the cluster (the caller removes DIR).

SLUICE_PG_VERSION_DEFAULT=15

# pg_find_bin prints the directory holding initdb and pg_ctl, or fails.
pg_find_bin() {
  local d others=()
  # Other installed major versions, newest first.
  mapfile -t others < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k4 -n -r)
  for d in "${SLUICE_TEST_PG_BIN:-}" "/usr/lib/postgresql/${SLUICE_PG_VERSION_DEFAULT}/bin" "${others[@]}"; do
    [[ -n "$d" && -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
  done
  return 1
}

# pg_as_owner CMD... runs CMD as the cluster owner: initdb and postgres refuse root.
pg_as_owner() {
  if is_root; then
    runuser -u "$SLUICE_TEST_PG_USER" -- "$@"
  else
    "$@"
  fi
}

# pg_provision makes sure the server binaries and an unprivileged owner exist.
pg_provision() {
  local bin
  if ! bin="$(pg_find_bin)"; then
    log "PostgreSQL server binaries not found: installing postgresql"
    apt_install postgresql
    bin="$(pg_find_bin)" || die "PostgreSQL installed but no initdb/pg_ctl under /usr/lib/postgresql/*/bin"
  fi
  export SLUICE_TEST_PG_BIN="$bin"
  if is_root; then
    export SLUICE_TEST_PG_USER="${SLUICE_TEST_PG_USER:-postgres}"
    if ! id -u "$SLUICE_TEST_PG_USER" >/dev/null 2>&1; then
      log "creating unprivileged user $SLUICE_TEST_PG_USER to own the test cluster"
      useradd --system --no-create-home --shell /usr/sbin/nologin "$SLUICE_TEST_PG_USER"
    fi
  else
    SLUICE_TEST_PG_USER="$(id -un)"
    export SLUICE_TEST_PG_USER
  fi
}

# pg_setup DIR: see the file comment.
pg_setup() {
  local root="$1" port
  pg_provision
  mkdir -p "$root/pg"
  if is_root; then chown "$SLUICE_TEST_PG_USER" "$root/pg"; fi
  chmod 0700 "$root/pg"
  export SLUICE_TEST_PG_DATADIR="$root/pg/data"
  export SLUICE_TEST_PG_LOG="$root/pg/postgres.log"
  port="$(free_ports 1)"
  export SLUICE_TEST_PG_PORT="$port"

  log "postgres: initdb in $SLUICE_TEST_PG_DATADIR ($SLUICE_TEST_PG_BIN)"
  # cd: the owner may not be allowed into the caller's working directory.
  if ! (cd "$root/pg" && pg_as_owner "$SLUICE_TEST_PG_BIN/initdb" -D "$SLUICE_TEST_PG_DATADIR" \
    -A trust -U sluice -E UTF8 --locale=C --no-sync >"$root/pg/initdb.log" 2>&1); then
    show_log_tail "$root/pg/initdb.log"
    die "postgres: initdb failed"
  fi
  # Settings live in the config file so a plain `pg_ctl start` (postgres-start.sh)
  # brings the cluster back on the same port and socket directory.
  cat >>"$SLUICE_TEST_PG_DATADIR/postgresql.conf" <<EOF

# --- sluice scripts/test.sh: throwaway test cluster ---
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$root/pg'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  "$(dirname "${BASH_SOURCE[0]}")/postgres-start.sh" || die "postgres: failed to start"
  if ! "$SLUICE_TEST_PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U sluice sluice_test; then
    show_log_tail "$SLUICE_TEST_PG_LOG"
    die "postgres: createdb sluice_test failed"
  fi
  export DATABASE_URL="postgres://sluice@127.0.0.1:$port/sluice_test?sslmode=disable"
  log "postgres: ready at $DATABASE_URL"
}

# pg_teardown stops the cluster if pg_setup started one.
pg_teardown() {
  [[ -n "${SLUICE_TEST_PG_DATADIR:-}" && -d "${SLUICE_TEST_PG_DATADIR:-}" ]] || return 0
  "$(dirname "${BASH_SOURCE[0]}")/postgres-stop.sh" || true
}
