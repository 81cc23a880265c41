#!/usr/bin/env bash
# Chaos for operators: inject one failure into a running shardstock and say
# what was done. Run a sale (make run, or a load generator) and call these
# from another terminal; watch /admin/ and the dashboard.
#
#   deploy/chaos/chaos.sh shard-kill PORT           SIGKILL a shard (a crash; AOF keeps what it answered)
#   deploy/chaos/chaos.sh shard-freeze PORT [SECS]  SIGSTOP a shard (hung: connections open, no answers); thaw after SECS if given
#   deploy/chaos/chaos.sh shard-thaw PORT           SIGCONT a frozen shard
#   deploy/chaos/chaos.sh shard-restart PORT        start a killed shard again from its AOF
#   deploy/chaos/chaos.sh shard-wipe PORT           SIGKILL a shard, delete its data, start it empty
#   deploy/chaos/chaos.sh shard-crash PORT [SECS]   a machine crash: the shard comes back from its AOF as the disk
#                                                   kept it. With appendfsync always (deploy/redis.sh's default)
#                                                   that is everything it answered: the AOF as it stood at the
#                                                   crash (frozen, copied, killed). With SECS, or everysec (1 s),
#                                                   as it was SECS before, without the writes since: what a
#                                                   crash takes with everysec, or from a disk that lied about fsync
#   deploy/chaos/chaos.sh broker-restart [SECS]     stop the RocketMQ broker, wait SECS (default 5), start it
#   deploy/chaos/chaos.sh db-restart [SECS]         SIGKILL MariaDB, wait SECS (default 5), start it
#   deploy/chaos/chaos.sh coordinator-kill [PID]    SIGKILL a coordinator process (default: make run's, by its
#                                                   pid file run/shardstock.pid); restart it yourself, or with:
#   deploy/chaos/chaos.sh coordinator-kill PID -- COMMAND...   ...then run COMMAND in the background to restart it
#   deploy/chaos/chaos.sh partition HOST PEER[,PEER...]
#                                                   on deploy/cluster.sh's hosts: cut HOST off from each PEER,
#                                                   both ways, and from no one else (packets dropped silently)
#   deploy/chaos/chaos.sh heal [HOST]               undo every cut (HOST's only, if given)
#
# By default the processes of `make run` are disturbed: its mode's directories
# (run/streams/ or run/rocketmq/). The deploy scripts' variables
# (SHARDSTOCK_REDIS_DIR, SHARDSTOCK_RMQ_DIR, SHARDSTOCK_MARIADB_DIR, ...) point
# elsewhere; partitions are made in the cluster of SHARDSTOCK_CLUSTER_DIR
# (default run/cluster).
set -euo pipefail
deploy=$(cd "$(dirname "$0")/.." && pwd)
run=$(cd "$deploy/.." && pwd)/run
mode=$(cat "$run/mode" 2>/dev/null || echo streams)
export SHARDSTOCK_REDIS_DIR=${SHARDSTOCK_REDIS_DIR:-$run/$mode/redis}
export SHARDSTOCK_RMQ_DIR=${SHARDSTOCK_RMQ_DIR:-$run/$mode/rocketmq}
export SHARDSTOCK_MARIADB_DIR=${SHARDSTOCK_MARIADB_DIR:-$run/$mode/mariadb}
say() { echo "chaos $(date -u +%H:%M:%S.%3N): $*"; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
need() { [ -n "${1:-}" ] || { usage >&2; exit 2; }; }

action=${1:-}; [ $# -gt 0 ] && shift
case "$action" in
  shard-kill) need "${1:-}"; say "SIGKILL shard :$1"; "$deploy/redis.sh" kill --ports "$1" ;;
  shard-freeze)
    need "${1:-}"; say "SIGSTOP shard :$1"; "$deploy/redis.sh" freeze --ports "$1"
    if [ -n "${2:-}" ]; then sleep "$2"; say "SIGCONT shard :$1 after ${2}s"; "$deploy/redis.sh" thaw --ports "$1"; fi ;;
  shard-thaw) need "${1:-}"; say "SIGCONT shard :$1"; "$deploy/redis.sh" thaw --ports "$1" ;;
  shard-restart) need "${1:-}"; say "start shard :$1 from its AOF"; "$deploy/redis.sh" start --ports "$1" ;;
  shard-wipe) need "${1:-}"; say "wipe shard :$1 (kill, delete data, start empty)"; "$deploy/redis.sh" wipe --ports "$1" ;;
  shard-crash)
    need "${1:-}"; d=$SHARDSTOCK_REDIS_DIR/$1
    [ -d "$d/appendonlydir" ] || { echo "chaos.sh: no AOF at $d/appendonlydir (set SHARDSTOCK_REDIS_DIR)" >&2; exit 1; }
    lose=${2:-}
    if [ -z "$lose" ]; then
      fsync=$("$deploy/redis.sh" cli "$1" CONFIG GET appendfsync | tail -1) ||
        { echo "chaos.sh: cannot read shard :$1's appendfsync (CONFIG GET as its admin); give SECS" >&2; exit 1; }
      [ "$fsync" = always ] || lose=1
    fi
    rm -rf "$d/crash-copy"
    if [ -z "$lose" ]; then
      # appendfsync always: a write is on disk before its answer leaves, so
      # the disk holds at least every answered write. Frozen, the shard
      # writes nothing more; its AOF as it stands is what the disk kept (and
      # perhaps the turn it was in, whose answers had not left: as if the
      # crash came a moment later).
      "$deploy/redis.sh" freeze --ports "$1" >/dev/null
      cp -a "$d/appendonlydir" "$d/crash-copy"
      "$deploy/redis.sh" kill --ports "$1" >/dev/null
      what="with appendfsync always, every answered write kept"
    else
      cp -a "$d/appendonlydir" "$d/crash-copy"
      say "shard :$1 AOF copied; crash in ${lose}s"; sleep "$lose"
      "$deploy/redis.sh" kill --ports "$1" >/dev/null
      what="without its last ${lose}s"
    fi
    rm -rf "$d/appendonlydir"; mv "$d/crash-copy" "$d/appendonlydir"
    say "machine crash of shard :$1: restarted from its AOF $what"; "$deploy/redis.sh" start --ports "$1" >/dev/null ;;
  broker-restart)
    say "stop the RocketMQ broker"; "$deploy/rocketmq.sh" stop-broker
    sleep "${1:-5}"; say "start the RocketMQ broker"; "$deploy/rocketmq.sh" start-broker ;;
  db-restart)
    say "SIGKILL MariaDB"; "$deploy/mariadb.sh" kill
    sleep "${1:-5}"; say "start MariaDB"; "$deploy/mariadb.sh" start ;;
  coordinator-kill)
    pid=${1:-}; [ $# -gt 0 ] && shift
    if [ -z "$pid" ]; then
      pid=$(cat "$run/shardstock.pid" 2>/dev/null) || { echo "chaos.sh: no run/shardstock.pid (is make run running?); give a PID" >&2; exit 1; }
    fi
    say "SIGKILL coordinator pid $pid"; kill -9 "$pid"
    if [ "${1:-}" = "--" ]; then shift; say "restart coordinator: $*"; nohup "$@" >/dev/null 2>&1 & say "restarted as pid $!"; fi ;;
  partition)
    need "${1:-}"; need "${2:-}"
    say "partition: $1 cut off from $2"
    "$deploy/cluster.sh" partition "$1" "$2" --dir "${SHARDSTOCK_CLUSTER_DIR:-$run/cluster}" | sed 's/^cluster.sh: /  /' ;;
  heal)
    say "heal${1:+ $1}: every cut undone"
    "$deploy/cluster.sh" heal ${1:+"$1"} --dir "${SHARDSTOCK_CLUSTER_DIR:-$run/cluster}" | sed 's/^cluster.sh: /  /' ;;
  ""|-h|--help|help) usage ;;
  *) echo "chaos.sh: unknown action $action" >&2; usage >&2; exit 2 ;;
esac
