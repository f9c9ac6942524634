#!/usr/bin/env bash
# A real single-node Apache Kafka broker (KRaft, broker+controller in one JVM) on 127.0.0.1.
# The jars come from Maven Central and are cached; nothing here needs Docker.
#
#   kafka.sh install   resolve the broker jars into the cache (idempotent, offline once cached)
#   kafka.sh start     format storage on first start, start, wait until the broker answers
#   kafka.sh stop      stop it and wait until its ports are closed
#   kafka.sh status    print running/stopped
#   kafka.sh env       the SASL listener's address and credentials, for var/stack.env
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_LIBS="$CACHE_DIR/kafka-$KAFKA_VERSION/libs"
KAFKA_DIR="$VAR_DIR/kafka"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_CONFIG="$KAFKA_DIR/server.properties"
# The SASL listener's password: random per machine, kept beside the broker's data (mode 600).
KAFKA_SASL_PASSWORD_FILE="$KAFKA_DIR/sasl-password"

install() {
  if [[ -f "$KAFKA_LIBS/.complete" ]]; then return 0; fi
  command -v java >/dev/null || die "java is required (OpenJDK 17+): apt-get install openjdk-17-jre-headless"
  command -v mvn >/dev/null || die "maven is required to fetch the broker jars: apt-get install maven"
  log "resolving Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_LIBS"
  rm -rf "$KAFKA_LIBS"; mkdir -p "$KAFKA_LIBS"
  mvn -q -B -Dstyle.color=never -f "$SCRIPT_DIR/kafka-pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >&2
  touch "$KAFKA_LIBS/.complete"
}

sasl_password() {
  if [[ ! -s "$KAFKA_SASL_PASSWORD_FILE" ]]; then
    mkdir -p "$KAFKA_DIR"
    ( umask 077; od -An -N16 -tx1 /dev/urandom | tr -d ' \n' > "$KAFKA_SASL_PASSWORD_FILE" )
  fi
  cat "$KAFKA_SASL_PASSWORD_FILE"
}

# The broker's configuration, on stdout.
render_config() {
  local password; password="$(sasl_password)"
  cat <<PROPS
# Written by scripts/stack/kafka.sh; edit the script, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT,SASL_PLAINTEXT://$KAFKA_HOST:$KAFKA_SASL_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,SASL_PLAINTEXT://$KAFKA_HOST:$KAFKA_SASL_PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USERNAME="$password";
log.dirs=$KAFKA_DATA
num.partitions=1
# Topics are created explicitly by "switchboard topics create", never by accident.
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
PROPS
}

write_config() {
  mkdir -p "$KAFKA_DIR/logs"
  ( umask 077; render_config > "$KAFKA_CONFIG" )
}

# Whether the running broker was started with another configuration (an older checkout's).
config_changed() { [[ -f "$KAFKA_CONFIG" ]] && ! diff -q <(render_config) "$KAFKA_CONFIG" >/dev/null; }

java_args() {
  printf '%s\n' "-Xmx$KAFKA_HEAP" "-Xms$KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$SCRIPT_DIR/kafka-log4j2.yaml" "-Dkafka.logs.dir=$KAFKA_DIR/logs" -cp "$KAFKA_LIBS/*"
}

java_cmd() { local args; mapfile -t args < <(java_args); java "${args[@]}" "$@"; }

start() {
  install
  if pid_alive "$KAFKA_PID" && config_changed; then
    log "kafka's configuration changed: restarting it"
    stop
  fi
  if pid_alive "$KAFKA_PID"; then log "kafka already running (pid $(cat "$KAFKA_PID"))"; return 0; fi
  if port_open "$KAFKA_PORT"; then die "port $KAFKA_PORT is taken by another process (set SWITCHBOARD_KAFKA_PORT)"; fi
  write_config
  if [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
    log "formatting KRaft storage in $KAFKA_DATA"
    mkdir -p "$KAFKA_DATA"
    local cluster_id; cluster_id="$(java_cmd kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
    java_cmd kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$KAFKA_CONFIG" >"$KAFKA_DIR/logs/format.log" 2>&1 \
      || { cat "$KAFKA_DIR/logs/format.log" >&2; die "formatting Kafka storage failed"; }
  fi
  log "starting kafka $KAFKA_VERSION on $KAFKA_HOST:$KAFKA_PORT"
  local args; mapfile -t args < <(java_args)
  # setsid: the broker must outlive this shell and not receive its terminal's signals.
  nohup setsid java "${args[@]}" kafka.Kafka "$KAFKA_CONFIG" >"$KAFKA_DIR/logs/stdout.log" 2>&1 </dev/null &
  echo $! > "$KAFKA_PID"
  if ! wait_port "$KAFKA_PORT" 60; then
    tail -n 30 "$KAFKA_DIR/logs/stdout.log" >&2 || true
    stop_pid "$KAFKA_PID" 10
    die "kafka did not open port $KAFKA_PORT within 60s (logs: $KAFKA_DIR/logs)"
  fi
  if ! wait_port "$KAFKA_SASL_PORT" 30; then
    tail -n 30 "$KAFKA_DIR/logs/stdout.log" >&2 || true
    stop_pid "$KAFKA_PID" 10
    die "kafka did not open its SASL port $KAFKA_SASL_PORT within 30s (logs: $KAFKA_DIR/logs)"
  fi
  log "kafka is listening (pid $(cat "$KAFKA_PID"))"
}

stop() {
  if pid_alive "$KAFKA_PID"; then log "stopping kafka"; fi
  stop_pid "$KAFKA_PID" 45
  wait_port "$KAFKA_PORT" 15 closed || die "port $KAFKA_PORT still open after stopping kafka"
  wait_port "$KAFKA_CONTROLLER_PORT" 15 closed || die "port $KAFKA_CONTROLLER_PORT still open after stopping kafka"
  wait_port "$KAFKA_SASL_PORT" 15 closed || die "port $KAFKA_SASL_PORT still open after stopping kafka"
}

# The SASL listener's settings for var/stack.env (tests use them; services keep the plaintext one).
env() {
  echo "SWITCHBOARD_KAFKA_SASL_BOOTSTRAP=$KAFKA_HOST:$KAFKA_SASL_PORT"
  echo "SWITCHBOARD_KAFKA_SASL_USERNAME=$KAFKA_SASL_USERNAME"
  echo "SWITCHBOARD_KAFKA_SASL_PASSWORD=$(sasl_password)"
}

status() { if pid_alive "$KAFKA_PID"; then echo "kafka: running (pid $(cat "$KAFKA_PID"), $KAFKA_HOST:$KAFKA_PORT)"; else echo "kafka: stopped"; fi; }

case "${1:-}" in
  install|start|stop|status|env) "$1" ;;
  *) die "usage: kafka.sh install|start|stop|status|env" ;;
esac
