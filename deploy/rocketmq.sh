#!/usr/bin/env bash
# Run Apache RocketMQ for shardstock: one NameServer and one Broker, with jars
# fetched from Maven Central into a cache dir and small heaps.
#
#   deploy/rocketmq.sh fetch     fetch the jars (mvn dependency:copy-dependencies on deploy/rocketmq/pom.xml)
#   deploy/rocketmq.sh start     fetch if needed, start the NameServer and the Broker, wait for "boot success"
#   deploy/rocketmq.sh stop [--wait]  stop both: SIGTERM, as mqshutdown does, and return at once
#                                (--wait: until they exited); a start waits for a previous one
#   deploy/rocketmq.sh stop-broker / start-broker    the Broker alone, stopped before it returns (outage drills)
#   deploy/rocketmq.sh status    print what runs
#
# environment:
#   SHARDSTOCK_RMQ_CACHE  jar cache dir            (default ~/.cache/shardstock/rocketmq-5.3.3)
#   SHARDSTOCK_RMQ_DIR    logs, config and store   (default ./run/rocketmq)
#   SHARDSTOCK_RMQ_HEAP   Broker heap              (default 512m; the NameServer gets 256m)
#   SHARDSTOCK_RMQ_BIND   address both listen on   (default 127.0.0.1; 0.0.0.0 for every interface)
# Ports: NameServer 9876, Broker 10911 (plus 10909 and 10912, which the Broker derives),
# all on SHARDSTOCK_RMQ_BIND (127.0.0.1): the HA port 10912 through
# rocketmq/LoopbackHAService.java, which fetch compiles into a jar beside the others.
set -euo pipefail
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077

here=$(cd "$(dirname "$0")" && pwd)
cache=${SHARDSTOCK_RMQ_CACHE:-$HOME/.cache/shardstock/rocketmq-5.3.3}
dir=${SHARDSTOCK_RMQ_DIR:-./run/rocketmq}
heap=${SHARDSTOCK_RMQ_HEAP:-512m}
bind=${SHARDSTOCK_RMQ_BIND:-127.0.0.1}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "rocketmq.sh: $*" >&2; exit 1; }

fetch() {
  if [ ! -f "$cache/.complete" ]; then
    command -v mvn >/dev/null || die "mvn is needed to fetch RocketMQ from Maven Central"
    command -v java >/dev/null || die "java 17 is needed to run RocketMQ"
    echo "rocketmq.sh: fetching RocketMQ jars from Maven Central into $cache"
    mkdir -p "$cache"
    mvn -q -B -Dstyle.color=never -f "$here/rocketmq/pom.xml" dependency:copy-dependencies -DoutputDirectory="$cache" \
      || die "mvn could not fetch the jars"
    touch "$cache/.complete"
  fi
  build_loopback_ha
}

# build_loopback_ha compiles rocketmq/LoopbackHAService.java (the HA port
# bound like the rest of the Broker) into a jar on the Broker's classpath,
# again whenever the source changed.
build_loopback_ha() {
  local jar="$cache/shardstock-loopback-ha.jar" src="$here/rocketmq/LoopbackHAService.java" sum
  sum=$(sha256sum "$src" | cut -d' ' -f1)
  [ -f "$jar" ] && [ "$(cat "$cache/.loopback-ha" 2>/dev/null)" = "$sum" ] && return
  command -v javac >/dev/null || die "javac (a JDK 17) is needed to build $jar"
  local tmp; tmp=$(mktemp -d)
  javac -nowarn -cp "$cache/*" -d "$tmp" "$src" || { rm -rf "$tmp"; die "could not compile $src"; }
  mkdir -p "$tmp/META-INF/service"
  echo io.shardstock.rocketmq.LoopbackHAService >"$tmp/META-INF/service/org.apache.rocketmq.store.ha.HAService"
  rm -f "$jar"
  (cd "$tmp" && jar cf "$jar" .) || { rm -rf "$tmp"; die "could not build $jar"; }
  rm -rf "$tmp"
  echo "$sum" >"$cache/.loopback-ha"
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
pid_of() { [ -f "$dir/$1.pid" ] && cat "$dir/$1.pid" || true; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && running "$p"; }

jvm() { # name heap main-class log-config args...
  local name=$1 heap=$2 main=$3 logconf=$4; shift 4
  mkdir -p "$dir/home" "$dir/logs"
  nohup java -server -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
    -Drocketmq.home.dir="$dir/home" -Duser.home="$dir" \
    -Drmq.logback.configurationFile="$logconf" -Dshardstock.ha.bind="$bind" \
    -cp "$cache/*" "$main" "$@" >"$dir/logs/$name.out" 2>&1 &
  echo $! >"$dir/$name.pid"
}

wait_boot() { # name
  for _ in $(seq 1 240); do
    if grep -q "boot success" "$dir/logs/$1.out" 2>/dev/null; then
      echo "$1 up (pid $(pid_of "$1"), log $dir/logs/$1.out)"; return
    fi
    alive "$1" || { tail -20 "$dir/logs/$1.out" >&2; die "$1 exited during start"; }
    sleep 0.25
  done
  tail -20 "$dir/logs/$1.out" >&2
  die "$1 did not boot within 60 s"
}

write_broker_conf() {
  mkdir -p "$dir/store/commitlog" "$dir/store/consumequeue" "$dir/store/index"
  cat >"$dir/broker.conf" <<CONF
# written by deploy/rocketmq.sh
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
namesrvAddr=127.0.0.1:9876
listenPort=10911
bindAddress=$bind
autoCreateTopicEnable=true
storePathRootDir=$dir/store
storePathCommitLog=$dir/store/commitlog
storePathConsumeQueue=$dir/store/consumequeue
storePathIndex=$dir/store/index
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=300000
deleteWhen=04
fileReservedTime=24
CONF
}

start_namesrv() {
  if alive namesrv; then echo "namesrv already running (pid $(pid_of namesrv))"; return; fi
  : >"$dir/logs/namesrv.out" 2>/dev/null || true
  printf '# written by deploy/rocketmq.sh\nlistenPort=9876\nbindAddress=%s\n' "$bind" >"$dir/namesrv.conf"
  jvm namesrv 256m org.apache.rocketmq.namesrv.NamesrvStartup rmq.namesrv.logback.xml -c "$dir/namesrv.conf"
  wait_boot namesrv
}

start_broker() {
  if alive broker; then echo "broker already running (pid $(pid_of broker))"; return; fi
  write_broker_conf
  : >"$dir/logs/broker.out" 2>/dev/null || true
  jvm broker "$heap" org.apache.rocketmq.broker.BrokerStartup rmq.broker.logback.xml -c "$dir/broker.conf"
  wait_boot broker
}

# signal_stop NAME: SIGTERM, as RocketMQ's own mqshutdown does; the JVM's
# shutdown hook then unregisters from the NameServer and flushes the store
# (about 10 s for the Broker) on its own.
signal_stop() {
  alive "$1" || { echo "$1 not running"; return; }
  kill "$(pid_of "$1")"
  echo "$1 shutting down (pid $(pid_of "$1"))"
}

# wait_gone NAME: wait up to 60 s for a stopping process to exit (SIGKILL after).
wait_gone() {
  local p; p=$(pid_of "$1")
  [ -n "$p" ] && running "$p" || return 0
  for _ in $(seq 1 600); do running "$p" || { echo "$1 stopped"; return; }; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  echo "$1 killed after 60 s"
}

case "${1:-}" in
  fetch) fetch ;;
  start) fetch; mkdir -p "$dir/logs"; wait_gone broker; wait_gone namesrv; start_namesrv; start_broker ;;
  stop) signal_stop broker; signal_stop namesrv
        if [ "${2:-}" = --wait ]; then wait_gone broker; wait_gone namesrv; fi ;;
  start-broker) fetch; mkdir -p "$dir/logs"; wait_gone broker; start_broker ;;
  stop-broker) signal_stop broker; wait_gone broker ;;
  status) for n in namesrv broker; do if alive $n; then echo "$n up pid $(pid_of $n)"; else echo "$n down"; fi; done ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $1 (see --help)" ;;
esac
