#!/usr/bin/env bash
# The quick start's processes: what `make run`, `make stop` and `make reset` do.
#
#   deploy/run.sh start [streams|rocketmq]  start 3 Redis masters (and MariaDB and RocketMQ for
#                                           rocketmq), then the server until Ctrl-C
#   deploy/run.sh stop                      stop the server (by its pid file), then every service
#                                           either mode started
#   deploy/run.sh reset [--force]           stop, then delete both modes' data (asks first,
#                                           unless --force or FORCE=1)
#
# Each mode keeps its data in a directory of its own, so one mode's stock never
# meets the other's orders: run/streams/ (Redis, SQLite, spool) and run/rocketmq/
# (Redis, MariaDB, RocketMQ, spool). Both use the same ports, so one runs at a time:
# starting a mode stops the other's services first.
#
# environment: SHARDSTOCK_ADMIN_TOKEN, SHARDSTOCK_HTTP_ADDR (the Makefile sets both).
# If the server fails to start, the services this start started are stopped again.
set -Eeuo pipefail
source "$(dirname "$0")/lib.sh"
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pidfile=$root/run/shardstock.pid
addr=${SHARDSTOCK_HTTP_ADDR:-127.0.0.1:8080}
token=${SHARDSTOCK_ADMIN_TOKEN:-local-dev-admin-token}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "run.sh: $*" >&2; exit 1; }
running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
server_pid() { [ -f "$pidfile" ] && cat "$pidfile" || true; }

# with_mode MODE CMD...: run a deploy script with MODE's data directories.
with_mode() {
  local mode=$1; shift
  SHARDSTOCK_REDIS_DIR=run/$mode/redis SHARDSTOCK_MARIADB_DIR=run/$mode/mariadb \
    SHARDSTOCK_RMQ_DIR=run/$mode/rocketmq "$@"
}

stop_server() {
  local pid; pid=$(server_pid)
  if [ -z "$pid" ] || ! running "$pid"; then rm -f "$pidfile"; echo "server not running"; return; fi
  kill -TERM "$pid"
  for _ in $(seq 1 150); do
    running "$pid" || { rm -f "$pidfile"; echo "server stopped (pid $pid)"; return; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "server killed after 15 s"
}

stop_mode() { # mode [--wait]
  [ -d "run/$1" ] || return 0
  with_mode "$1" deploy/redis.sh stop
  if [ "$1" = rocketmq ]; then
    with_mode "$1" deploy/rocketmq.sh stop ${2:-}
    with_mode "$1" deploy/mariadb.sh stop
  fi
}

stop_all() { # [--wait]
  stop_server
  stop_mode streams "$@"
  stop_mode rocketmq "$@"
}

# started lists what this start started, for the clean-up of a failed start.
started=()
start_service() { # mode script: start it unless it runs, and remember it if we started it
  local mode=$1 script=$2
  local status; status=$(with_mode "$mode" "deploy/$script" status)
  if ! grep -q down <<<"$status"; then
    echo "$script: already running"
    return
  fi
  started+=("$script")
  with_mode "$mode" "deploy/$script" start
}

undo_start() {
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do with_mode "$mode" "deploy/${started[$i]}" stop || true; done
}

start() {
  mode=${1:-streams}
  case "$mode" in streams|rocketmq) ;; *) die "mode must be streams or rocketmq, not '$mode'" ;; esac
  local pid; pid=$(server_pid)
  if [ -n "$pid" ] && running "$pid"; then
    die "a server from make run is already running (pid $pid); 'make stop' stops it"
  fi
  local other=streams; [ "$mode" = streams ] && other=rocketmq
  stop_mode "$other" --wait >/dev/null
  mkdir -p "run/$mode"
  echo "$mode" >run/mode # for deploy/chaos/chaos.sh
  command -v curl >/dev/null || { echo "run.sh: installing curl from Debian"; apt_install -- curl; }
  trap 'echo "run.sh: start failed; stopping what it started" >&2; undo_start' ERR
  start_service "$mode" redis.sh
  local mq=streams db="sqlite:run/$mode/orders.db" dbca= mqflags=()
  if [ "$mode" = rocketmq ]; then
    start_service "$mode" mariadb.sh
    start_service "$mode" rocketmq.sh
    mq=rocketmq://127.0.0.1:9876
    # The coordinators' ACL user on the broker: its file, not its secret,
    # goes on the command line.
    mqflags=(--mq-credentials-file "$(with_mode "$mode" deploy/rocketmq.sh credentials-file coordinator)")
    db=$(with_mode "$mode" deploy/mariadb.sh dsn)
    dbca=$(with_mode "$mode" deploy/mariadb.sh ca)
  fi
  trap - ERR
  SHARDSTOCK_SHARDS=$(with_mode "$mode" deploy/redis.sh urls) SHARDSTOCK_ADMIN_TOKEN=$token SHARDSTOCK_HTTP_ADDR=$addr SHARDSTOCK_DEV=1 \
    SHARDSTOCK_MQ=$mq SHARDSTOCK_DB=$db SHARDSTOCK_DB_CA_FILE=$dbca SHARDSTOCK_SPOOL_DIR=run/$mode/spool \
    bin/shardstock serve "${mqflags[@]}" &
  pid=$!
  echo "$pid" >"$pidfile"
  trap 'kill -TERM "$pid" 2>/dev/null || true' INT TERM
  local ready=""
  for _ in $(seq 1 1200); do # 60 s: RocketMQ's routes can take a while on a fresh broker
    running "$pid" || break
    if curl -fsS -o /dev/null "http://$addr/readyz" 2>/dev/null; then ready=1; break; fi
    sleep 0.05
  done
  if [ -z "$ready" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    echo "run.sh: the server did not start (its error is above); stopping what this start started" >&2
    undo_start
    exit 1
  fi
  banner
  local rc
  while :; do
    rc=0
    wait "$pid" || rc=$? # a trapped Ctrl-C ends the wait early; the server is still draining
    running "$pid" || break
  done
  rm -f "$pidfile"
  echo "server stopped; 'make stop' stops the shards$([ "$mode" = rocketmq ] && echo ", MariaDB and RocketMQ")"
  return "$rc"
}

banner() {
  local u="http://$addr"
  cat <<EOF

shardstock is up ($mode mode, data in run/$mode/):
  sale page         $u/
  operators' page   $u/admin/   (admin token: $token)
  metrics           $u/metrics
  API contract      $u/openapi.yaml

Try, in another terminal (README: "Quick start"):
  curl -s -X PUT -H 'Authorization: Bearer $token' -H 'Content-Type: application/json' \\
       -d '{"stock":1000,"per_user_limit":1}' $u/admin/v1/products/lamp
  curl -s -X POST -H 'X-User-ID: alice' $u/api/v1/products/lamp/purchase
  SHARDSTOCK_ADMIN_TOKEN=$token bin/shardstock loadgen
                    # a race for lamp: progress bar, report, invariants checked

Ctrl-C stops the server; 'make stop' stops everything; 'make reset' deletes the data.
EOF
}

reset() {
  local force=${FORCE:-}
  [ "${1:-}" = --force ] && force=1
  if [ "$force" != 1 ]; then
    [ -t 0 ] || die "reset deletes run/streams and run/rocketmq: run it in a terminal to confirm, or with FORCE=1"
    read -r -p "Delete every order, shard and broker file of both quick-start modes (run/streams, run/rocketmq)? [y/N] " yes
    case "$yes" in y|Y|yes) ;; *) echo "nothing deleted"; return ;; esac
  fi
  stop_all --wait
  # MariaDB's own files may be outside run/ (deploy/mariadb.sh: "Where the files are").
  [ ! -d run/rocketmq/mariadb ] || with_mode rocketmq deploy/mariadb.sh remove >/dev/null
  [ ! -d run/rocketmq/rocketmq ] || with_mode rocketmq deploy/rocketmq.sh remove >/dev/null # (likewise the broker's)
  rm -rf run/streams run/rocketmq
  echo "deleted run/streams and run/rocketmq"
}

case "${1:-}" in
  start) start "${2:-streams}" ;;
  stop) stop_all ;;
  reset) reset "${2:-}" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
