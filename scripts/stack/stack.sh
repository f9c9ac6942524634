#!/usr/bin/env bash
# The local stack: Kafka + PostgreSQL, topics created, migrations applied, settings written.
#
#   stack.sh up       start both (idempotent), create topics, migrate, write var/stack.env
#   stack.sh down     stop both; nothing is left listening
#   stack.sh status   one line per component
#   stack.sh clean    down, then delete all local data (var/)
#   stack.sh stop-demo  stop the processes `make demo` left running (`make test` does, first)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SWITCHBOARD="${SWITCHBOARD_BIN:-$REPO_ROOT/.venv/bin/switchboard}"

write_stack_env() {
  mkdir -p "$VAR_DIR"
  local tmp="$STACK_ENV.tmp"
  ( umask 077
    {
      echo "# Written by 'make up' (scripts/stack/stack.sh). Connection settings of the local stack."
      echo "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_HOST:$KAFKA_PORT"
      "$SCRIPT_DIR/kafka.sh" env
      "$SCRIPT_DIR/postgres.sh" env
    } > "$tmp" )
  mv "$tmp" "$STACK_ENV"
}

up() {
  "$SCRIPT_DIR/postgres.sh" start
  "$SCRIPT_DIR/kafka.sh" start
  write_stack_env
  [[ -x "$SWITCHBOARD" ]] || die "$SWITCHBOARD not found: run 'make venv' first"
  set -a; source "$STACK_ENV"; set +a
  "$SWITCHBOARD" topics create --wait 60
  "$SWITCHBOARD" migrate
  log "stack is up; settings in $STACK_ENV"
}

# The processes `make demo` left running (scripts/demo/processes.py writes their pid files):
# SIGTERM those whose command line is still ours, wait up to 30 s, then SIGKILL.
stop_demo() {
  local f pid pids=()
  # The supervisor first (scripts/demo/supervise.py), so that it never restarts what is being stopped.
  for f in "$VAR_DIR"/demo/pids/supervisor.pid "$VAR_DIR"/demo/pids/*.pid; do
    [[ -e "$f" ]] || continue
    pid="$(cat "$f")"
    if [[ "$pid" =~ ^[0-9]+$ ]] && grep -qaE 'services\.cli|scripts\.channel_server|services\.api\.mcp|scripts\.demo\.supervise' "/proc/$pid/cmdline" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
    fi
    rm -f "$f"
  done
  for _ in $(seq 300); do
    local alive=()
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
    pids=("${alive[@]}")
    [[ ${#pids[@]} -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  [[ -d "$VAR_DIR/demo/pids" ]] && log "demo processes stopped"
  return 0
}

down() {
  stop_demo
  "$SCRIPT_DIR/kafka.sh" stop
  "$SCRIPT_DIR/postgres.sh" stop
}

status() {
  "$SCRIPT_DIR/postgres.sh" status
  "$SCRIPT_DIR/kafka.sh" status
}

clean() {
  down
  "$SCRIPT_DIR/postgres.sh" clean
  rm -rf "$VAR_DIR/kafka" "$STACK_ENV"
  log "local data removed"
}

case "${1:-}" in
  up|down|status|clean) "$1" ;;
  stop-demo) stop_demo ;;
  *) die "usage: stack.sh up|down|status|clean|stop-demo" ;;
esac
