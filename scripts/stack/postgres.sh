#!/usr/bin/env bash
# A private PostgreSQL cluster for Switchboard on 127.0.0.1 (default port 55432), never the
# system cluster. Installs the Debian packages when missing. As root, initdb and postgres run
# as the unprivileged system user "postgres" (they refuse to run as root).
#
#   postgres.sh install   apt-get install postgresql when its binaries are missing
#   postgres.sh start     initdb on first start, start, wait until it answers, ensure roles + db
#   postgres.sh stop      fast shutdown, wait until the port is closed
#   postgres.sh status    print running/stopped
#   postgres.sh env       print DATABASE_URL / DATABASE_OWNER_URL lines for var/stack.env
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PG_STATE="$VAR_DIR/postgres"

pg_bindir() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do [[ -x "$dir/initdb" ]] && echo "$dir"; done | sort -V | tail -1
}

install() {
  # PgBouncer is not part of the stack: the tests put one in front of PostgreSQL to check what a
  # connection pooler changes (tests/support/pgbouncer.py), each on a port of its own. Installed with
  # PostgreSQL; the stack never starts it (where the host lets packages start services, Debian's own
  # runs on 6432 and nothing here uses it).
  local packages=()
  [[ -n "$(pg_bindir)" ]] || packages+=(postgresql postgresql-contrib)
  command -v pgbouncer >/dev/null || [[ -x /usr/sbin/pgbouncer ]] || packages+=(pgbouncer)
  ((${#packages[@]})) || return 0
  if [[ $EUID -ne 0 ]]; then
    [[ -n "$(pg_bindir)" ]] || die "PostgreSQL server binaries are missing; install them: sudo apt-get install postgresql"
    log "pgbouncer is missing (the pooler tests need it): sudo apt-get install pgbouncer"
    return 0
  fi
  log "installing ${packages[*]} from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # policy-rc.d, where the host has one, stops the packages from starting the system cluster on 5432.
  apt-get install -y -qq "${packages[@]}" >&2
}

# The unprivileged user that owns the cluster: "postgres" when we are root, else ourselves.
run_as() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# The data directory must be reachable by the cluster's user. As root in a folder that user
# cannot enter (e.g. a clone under /root), fall back to a per-checkout folder in /var/tmp.
data_root() {
  mkdir -p "$PG_STATE"
  if [[ $EUID -eq 0 ]] && ! runuser -u postgres -- test -x "$PG_STATE"; then
    local alt; alt="/var/tmp/switchboard-pg-$(printf '%s' "$PG_STATE" | md5sum | cut -c1-12)"
    mkdir -p "$alt"; echo "$alt"
  else
    echo "$PG_STATE"
  fi
}

PG_ROOT="$(data_root)"
PG_DATA="$PG_ROOT/data"
PG_SOCKET_DIR="$PG_ROOT/run"
PG_LOG="$PG_ROOT/postgres.log"
PG_SECRETS="$PG_STATE/credentials.env"

superuser_psql() {
  run_as "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PG_PORT" -U postgres "$@"
}

ensure_credentials() {
  if [[ ! -f "$PG_SECRETS" ]]; then
    umask 077
    printf 'PG_OWNER_PASSWORD=%s\nPG_APP_PASSWORD=%s\n' \
      "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')" > "$PG_SECRETS"
  fi
  # shellcheck disable=SC1090
  source "$PG_SECRETS"
}

init_cluster() {
  [[ -f "$PG_DATA/PG_VERSION" ]] && return 0
  log "creating a private PostgreSQL cluster in $PG_DATA"
  mkdir -p "$PG_DATA" "$PG_SOCKET_DIR"
  [[ $EUID -eq 0 ]] && chown -R postgres:postgres "$PG_ROOT"
  run_as "$(pg_bindir)/initdb" -D "$PG_DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >"$PG_ROOT/initdb.log" 2>&1 || { cat "$PG_ROOT/initdb.log" >&2; die "initdb failed"; }
  cat >> "$PG_DATA/postgresql.conf" <<CONF
# Switchboard local stack (scripts/stack/postgres.sh)
listen_addresses = '127.0.0.1'
unix_socket_directories = '$PG_SOCKET_DIR'
max_connections = 200
shared_buffers = 128MB
fsync = on
log_min_messages = warning
CONF
}

ensure_roles_and_database() {
  ensure_credentials
  superuser_psql -d postgres <<SQL
SELECT format('CREATE ROLE %I LOGIN CREATEDB', '$PG_OWNER_ROLE') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_OWNER_ROLE') \gexec
SELECT format('CREATE ROLE %I LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE', '$PG_APP_ROLE') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$PG_APP_ROLE') \gexec
ALTER ROLE $PG_OWNER_ROLE PASSWORD '$PG_OWNER_PASSWORD';
ALTER ROLE $PG_APP_ROLE PASSWORD '$PG_APP_PASSWORD' NOBYPASSRLS;
SELECT format('CREATE DATABASE %I OWNER %I', '$PG_DATABASE', '$PG_OWNER_ROLE') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$PG_DATABASE') \gexec
SQL
  superuser_psql -d "$PG_DATABASE" -c "GRANT ALL ON SCHEMA public TO $PG_OWNER_ROLE; GRANT USAGE ON SCHEMA public TO $PG_APP_ROLE;"
}

start() {
  install
  init_cluster
  if run_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    log "postgres already running on $PG_HOST:$PG_PORT"
  else
    if port_open "$PG_PORT"; then die "port $PG_PORT is taken by another process (set SWITCHBOARD_PG_PORT)"; fi
    log "starting postgres on $PG_HOST:$PG_PORT"
    [[ $EUID -eq 0 ]] && chown postgres:postgres "$PG_ROOT" "$PG_SOCKET_DIR"
    run_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -o "-p $PG_PORT" -w -t 60 start >/dev/null \
      || { tail -n 30 "$PG_LOG" >&2; die "postgres did not start (log: $PG_LOG)"; }
  fi
  local waited=0
  until "$(pg_bindir)/pg_isready" -q -h "$PG_HOST" -p "$PG_PORT"; do
    (( waited++ > 300 )) && die "postgres does not answer on $PG_HOST:$PG_PORT"; sleep 0.1
  done
  ensure_roles_and_database
}

stop() {
  if [[ -f "$PG_DATA/PG_VERSION" ]] && run_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    log "stopping postgres"
    run_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null
  fi
  wait_port "$PG_PORT" 15 closed || die "port $PG_PORT still open after stopping postgres"
}

status() {
  if [[ -f "$PG_DATA/PG_VERSION" ]] && run_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    echo "postgres: running ($PG_HOST:$PG_PORT, data $PG_DATA)"
  else
    echo "postgres: stopped"
  fi
}

env() {
  ensure_credentials
  local base="$PG_HOST:$PG_PORT/$PG_DATABASE"
  echo "DATABASE_URL=postgresql+psycopg://$PG_APP_ROLE:$PG_APP_PASSWORD@$base"
  echo "DATABASE_OWNER_URL=postgresql+psycopg://$PG_OWNER_ROLE:$PG_OWNER_PASSWORD@$base"
  echo "DATABASE_APP_ROLE=$PG_APP_ROLE"
}

clean() { stop; rm -rf "$PG_ROOT/data" "$PG_ROOT/run" "$PG_STATE"; }

case "${1:-}" in
  install|start|stop|status|env|clean) "$1" ;;
  *) die "usage: postgres.sh install|start|stop|status|env|clean" ;;
esac
