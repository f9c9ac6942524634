# Shared by the stack scripts: paths, ports and small helpers. Sourced, not run.
# Every value can be overridden from the environment (see README "Configuration").

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VAR_DIR="${SWITCHBOARD_VAR_DIR:-$REPO_ROOT/var}"
CACHE_DIR="${SWITCHBOARD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/switchboard}"
STACK_ENV="$VAR_DIR/stack.env"

KAFKA_VERSION="${SWITCHBOARD_KAFKA_VERSION:-4.4.0}"
KAFKA_HOST="127.0.0.1"
KAFKA_PORT="${SWITCHBOARD_KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${SWITCHBOARD_KAFKA_CONTROLLER_PORT:-9093}"
# A second listener that requires SASL/PLAIN: the tests prove every client authenticates there.
KAFKA_SASL_PORT="${SWITCHBOARD_KAFKA_SASL_PORT:-9094}"
KAFKA_SASL_USERNAME="switchboard"
KAFKA_HEAP="${SWITCHBOARD_KAFKA_HEAP:-512m}"

PG_HOST="127.0.0.1"
PG_PORT="${SWITCHBOARD_PG_PORT:-55432}"
PG_DATABASE="${SWITCHBOARD_PG_DATABASE:-switchboard}"
PG_OWNER_ROLE="switchboard_owner"
PG_APP_ROLE="switchboard_app"

log() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] error: %s\n' "$*" >&2; exit 1; }

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Wait until port $1 opens (or closes, with $3=closed), at most $2 seconds.
wait_port() {
  local port="$1" timeout="$2" want="${3:-open}" waited=0
  while :; do
    if [[ "$want" == open ]] && port_open "$port"; then return 0; fi
    if [[ "$want" == closed ]] && ! port_open "$port"; then return 0; fi
    (( waited >= timeout * 10 )) && return 1
    sleep 0.1; waited=$((waited + 1))
  done
}

# Is the process in pid file $1 alive?
pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stop the process in pid file $1: SIGTERM, wait up to $2 s, then SIGKILL.
stop_pid() {
  local pidfile="$1" timeout="$2" pid waited=0
  pid_alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && (( waited < timeout * 10 )); do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then log "pid $pid ignored SIGTERM for ${timeout}s, killing"; kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$pidfile"
}
