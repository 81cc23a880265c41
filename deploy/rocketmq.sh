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
#   deploy/rocketmq.sh remove    stop both, then delete DIR and the JVMs' directory (wherever it is)
#   deploy/rocketmq.sh credentials coordinator|payment|admin
#                                print that role's USER:SECRET (SHARDSTOCK_MQ_CREDENTIALS)
#   deploy/rocketmq.sh credentials-file coordinator|payment|admin
#                                print the file that holds them (--mq-credentials-file)
#   deploy/rocketmq.sh url [coordinator|payment]
#                                print rocketmq://USER:SECRET@HOST:9876 (SHARDSTOCK_MQ;
#                                default coordinator)
#   deploy/rocketmq.sh mqadmin ARGS...   RocketMQ's admin tool, logged in as the admin
#
# ACL (RocketMQ ACL 2.0: authentication and authorization on the Broker): every
# request must be signed by a user, and a user may do only what it is granted.
# Secrets are made up once, written to DIR/acl/ROLE.credentials (USER:SECRET,
# mode 0600) and applied at every start (deploy/rocketmq/AclSetup.java):
#   admin        shardstock-admin: the super user (users, ACLs, broker config; mqadmin)
#   coordinator  shardstock-coordinator: publish, consume and create topics (any name:
#                a namespace goes in front of shardstock's), consumer groups;
#                nothing else (no broker config, users or ACLs)
#   payment      shardstock-payment-centre: publish to shardstock_payments, nothing else
#                (with SHARDSTOCK_RMQ_NAMESPACE=NAME: NAME_shardstock_payments)
# The NameServer has no authentication in RocketMQ 5.3.3 (it serves routes);
# it listens on SHARDSTOCK_RMQ_BIND like the Broker.
#
# environment:
#   SHARDSTOCK_RMQ_CACHE  jar cache dir            (default ~/.cache/shardstock/rocketmq-5.3.3)
#   SHARDSTOCK_RMQ_DIR    logs, config and store   (default ./run/rocketmq)
#   SHARDSTOCK_RMQ_HEAP   Broker heap              (default 512m; the NameServer gets 256m)
#   SHARDSTOCK_RMQ_BIND   address both listen on   (default 127.0.0.1; 0.0.0.0 for every interface)
#   SHARDSTOCK_RMQ_HOST   the address clients are told to reach the Broker at, and url prints
#                         (default SHARDSTOCK_RMQ_BIND; 127.0.0.1 when that is 0.0.0.0): the
#                         NameServer hands it to every client, so it must be this host's
#                         address on the network the coordinators are on, never loopback there
#   SHARDSTOCK_RMQ_NAMESRV  the NameServer the Broker registers with (default HOST:9876)
#   SHARDSTOCK_RMQ_ACL    on (default) or off: no authentication at all (to see what the ACL stops)
#   SHARDSTOCK_RMQ_NAMESPACE  the namespace of SHARDSTOCK_MQ whose payments topic the
#                         payment centre may publish to (default none)
# As root (CI), the NameServer and the Broker run as the system user shardstock-mq
# (made once), in DIR/data: their logs, home, store and NameServer state in
# DIR/data/{logs,home,store,namesrv} are that user's alone; the jars (a copy in
# DIR/data/lib) and the configuration are root's, readable by the user; the pid files
# and DIR/acl (the credentials) are root's alone. When the user cannot reach DIR (a
# directory on the way is closed to others), DIR/data links to
# /var/lib/shardstock/rocketmq-XXXXXX, which remove deletes with DIR.
# Ports: NameServer 9876, Broker 10911 (plus 10909 and 10912, which the Broker derives),
# all on SHARDSTOCK_RMQ_BIND (127.0.0.1): the HA port 10912 through
# rocketmq/LoopbackHAService.java, which fetch compiles into a jar beside the others.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077

here=$(cd "$(dirname "$0")" && pwd)
cache=${SHARDSTOCK_RMQ_CACHE:-$HOME/.cache/shardstock/rocketmq-5.3.3}
dir=${SHARDSTOCK_RMQ_DIR:-./run/rocketmq}
heap=${SHARDSTOCK_RMQ_HEAP:-512m}
bind=${SHARDSTOCK_RMQ_BIND:-127.0.0.1}
if [ "$bind" = 0.0.0.0 ]; then host=${SHARDSTOCK_RMQ_HOST:-127.0.0.1}; else host=${SHARDSTOCK_RMQ_HOST:-$bind}; fi
namesrv=${SHARDSTOCK_RMQ_NAMESRV:-$host:9876}
acl=${SHARDSTOCK_RMQ_ACL:-on}
case "$acl" in on|off) ;; *) echo "rocketmq.sh: SHARDSTOCK_RMQ_ACL must be on or off, not '$acl'" >&2; exit 1 ;; esac
payments_topic=${SHARDSTOCK_RMQ_NAMESPACE:+${SHARDSTOCK_RMQ_NAMESPACE}_}shardstock_payments
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
user=$(service_user shardstock-mq) # ("" unless root)
drop=()
# (--reset-env: root's environment, its SHARDSTOCK_* secrets among it, stays root's)
[ -z "$user" ] || drop=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --no-new-privs --reset-env)
uid=$(id -u "${user:-$(id -un)}")

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
  build_jar
}

# build_jar compiles rocketmq/*.java (LoopbackHAService: the HA port bound
# like the rest of the Broker; AclSetup: the users and ACLs) into a jar on
# the Broker's classpath, again whenever a source changed.
build_jar() {
  local jar="$cache/shardstock-rocketmq.jar" sum
  sum=$(cat "$here"/rocketmq/*.java | sha256sum | cut -d' ' -f1)
  rm -f "$cache/shardstock-loopback-ha.jar" "$cache/.loopback-ha" # (its old name)
  [ -f "$jar" ] && [ "$(cat "$cache/.shardstock-jar" 2>/dev/null)" = "$sum" ] && return
  command -v javac >/dev/null || die "javac (a JDK 17) is needed to build $jar"
  local tmp; tmp=$(mktemp -d)
  javac -nowarn -cp "$cache/*" -d "$tmp" "$here"/rocketmq/*.java || { rm -rf "$tmp"; die "could not compile $here/rocketmq/*.java"; }
  mkdir -p "$tmp/META-INF/service"
  echo io.shardstock.rocketmq.LoopbackHAService >"$tmp/META-INF/service/org.apache.rocketmq.store.ha.HAService"
  rm -f "$jar"
  (cd "$tmp" && jar cf "$jar" .) || { rm -rf "$tmp"; die "could not build $jar"; }
  rm -rf "$tmp"
  echo "$sum" >"$cache/.shardstock-jar"
}

# credentials ROLE: the file holding ROLE's USER:SECRET, made up the first time.
credentials() {
  local f="$dir/acl/$1.credentials" user
  case "$1" in
    admin) user=shardstock-admin ;;
    coordinator) user=shardstock-coordinator ;;
    payment) user=shardstock-payment-centre ;;
    *) die "no role '$1': admin, coordinator or payment" ;;
  esac
  if [ ! -s "$f" ]; then
    mkdir -p "$dir/acl"
    (umask 077; echo "$user:$(head -c 24 /dev/urandom | base64 | tr -d '/+=')" >"$f")
  fi
  echo "$f"
}

secret_of() { cut -d: -f2- "$(credentials "$1")"; }
user_of() { cut -d: -f1 "$(credentials "$1")"; }

# apply_acl: the users and their grants, as the admin (see the top).
apply_acl() {
  [ "$acl" = on ] || return 0
  java -Xmx128m -Drocketmq.client.logRoot="$dir/acl/logs" -Duser.home="$dir/acl" -cp "$cache/*" io.shardstock.rocketmq.AclSetup \
    "$namesrv" "$host:10911" "$(credentials admin)" \
    --user "$(credentials coordinator)" --grant 'Topic:*' Pub,Sub,Create,Get --grant 'Group:*' Sub,Get \
    --user "$(credentials payment)" --grant "Topic:$payments_topic" Pub \
    >"$dir/acl/acl.out" 2>&1 || { tail -20 "$dir/acl/acl.out" >&2; die "could not set the Broker's users and ACLs"; }
  sed 's/^/rocketmq.sh: /' "$dir/acl/acl.out" | grep 'acl:' || true
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
# pid_of NAME: the pid on record, if its process is still the user's (a
# stale pid file never makes root signal another process).
pid_of() {
  local p; p=$(cat "$dir/$1.pid" 2>/dev/null) || return 0
  [ -n "$p" ] && [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$uid" ] && echo "$p" || true
}
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && running "$p"; }

# layout: the JVMs' directory DIR/data, made and owned as the top says, and
# data set to its real path. When the user cannot reach DIR (a directory on
# the way is closed to others: the JVM opens its jars by their full path),
# DIR/data links to /var/lib/shardstock/rocketmq-XXXXXX. What an earlier
# layout kept in DIR itself moves in, and becomes the user's (chown -R
# follows no symbolic link); from here on root writes nothing in the
# user's directories, where the JVMs could have planted links.
layout() {
  local d group=""
  if [ -n "$user" ]; then
    group=$(id -gn "$user")
    # DIR is root's alone: a link planted in it would send what follows
    # (chown, the configuration with the admin's secret) elsewhere.
    [ "$(stat -c %u "$dir")" = 0 ] && [ -z "$(find "$dir" -maxdepth 0 -perm /022)" ] ||
      die "$dir must be root's and writable by root alone: it holds the credentials and the link to the broker's files"
  fi
  if [ ! -e "$dir/data" ] && [ ! -L "$dir/data" ]; then
    if [ -z "$user" ] || runuser -u "$user" -- test -x "$dir"; then
      mkdir "$dir/data"
    else
      [ -d /var/lib/shardstock ] || mkdir -m 711 /var/lib/shardstock
      ln -s "$(mktemp -d /var/lib/shardstock/rocketmq-XXXXXX)" "$dir/data"
    fi
    if [ -n "$user" ]; then chown "root:$group" "$dir/data/"; chmod 0710 "$dir/data/"; fi
  fi
  [ -d "$dir/data" ] || die "$dir/data links to $(readlink "$dir/data"), which is gone: delete $dir/data to start an empty broker"
  data=$(readlink -f "$dir/data")
  # The user's directories are made once; root never walks them again (the
  # user could have planted links or hard links there by then).
  for d in logs home store namesrv; do
    [ ! -e "$data/$d" ] || continue
    if [ -d "$dir/$d" ]; then
      # (the layout before DIR/data, written by the JVMs as root: made the user's once)
      mv "$dir/$d" "$data/$d"
      if [ -n "$user" ]; then chown -R "$user:$group" "$data/$d"; chmod -R go-rwx "$data/$d"; fi
    elif [ -n "$user" ]; then
      install -d -o "$user" -g "$group" -m 0700 "$data/$d"
    else
      mkdir "$data/$d"
    fi
  done
  if [ -n "$user" ]; then
    runuser -u "$user" -- test -x "$data" || die "$user cannot reach $data (a directory on the way is closed to others)"
  fi
  copy_jars "$group"
}

# copy_jars GROUP: data/lib, the jars the JVMs run (the cache may sit where
# the user cannot read, such as root's home), copied again when they change.
copy_jars() {
  local stamp; stamp=$(cd "$cache" && ls -l --time-style=+%s -- *.jar | sha256sum | cut -d' ' -f1)
  [ "$(cat "$data/lib/.stamp" 2>/dev/null)" = "$stamp" ] && return
  rm -rf "$data/lib.new" && mkdir -m 0750 "$data/lib.new"
  cp -p "$cache"/*.jar "$data/lib.new/"
  if [ -n "$1" ]; then chgrp -R "$1" "$data/lib.new"; chmod 0640 "$data/lib.new"/*.jar; fi
  echo "$stamp" >"$data/lib.new/.stamp"
  rm -rf "$data/lib" && mv "$data/lib.new" "$data/lib"
}

# remove: stop, then delete DIR and the JVMs' directory (wherever it is).
remove() {
  signal_stop broker; signal_stop namesrv; wait_gone broker; wait_gone namesrv
  local t=""
  if [ -L "$dir/data" ]; then
    t=$(readlink "$dir/data")
    [[ $t =~ ^/var/lib/shardstock/rocketmq-[A-Za-z0-9]{6}$ ]] ||
      die "$dir/data links to $t, which this script did not make: delete it yourself"
    rm -rf -- "$t"
  fi
  rm -rf -- "$dir"
  echo "deleted $dir${t:+ and $t}"
}

# as_user CMD...: CMD as the user ("": as we are).
as_user() { "${drop[@]}" "$@"; }

# jvm starts a JVM as the user, in data (every path it is given is full: the
# JVM reads its working directory wrongly as another user), its output in
# logs/NAME.out, opened as the user, in a session of its own (no terminal
# of the operator's to type into); the pid file holds the JVM's own pid
# (each program execs the next).
jvm() { # name heap main-class log-config args...
  local name=$1 heap=$2 main=$3 logconf=$4; shift 4
  # The last run's output goes first, before the start returns: the JVM's
  # shell opens the file a moment later, and wait_boot read the last run's
  # "boot success" meanwhile (a restarted Broker's ACLs were set before it
  # listened: TestChaos, broker-restart).
  (cd "$data" && as_user rm -f -- "logs/$name.out")
  (cd "$data" || exit
    "${drop[@]}" setsid nohup sh -c 'out=$1; shift; exec "$@" >"$out" 2>&1' sh "logs/$name.out" \
    java -server -Xms"$heap" -Xmx"$heap" -XX:+UseG1GC -XX:-OmitStackTraceInFastThrow \
    -Drocketmq.home.dir="$data/home" -Duser.home="$data" \
    -Drmq.logback.configurationFile="$logconf" -Dshardstock.ha.bind="$bind" \
    -cp "$data/lib/*" "$main" "$@" </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/$name.pid")
}

# log NAME: the JVM's output so far, read as its user (a link it planted
# in its logs shows root's files to no one).
log() { (cd "$data" && as_user cat -- "logs/$1.out" 2>/dev/null) || true; }

wait_boot() { # name
  for _ in $(seq 1 240); do
    if log "$1" | grep -q "boot success"; then
      echo "$1 up (pid $(pid_of "$1"), as ${user:-$(id -un)}, log $data/logs/$1.out)"; return
    fi
    alive "$1" || { log "$1" | tail -20 >&2; die "$1 exited during start"; }
    sleep 0.25
  done
  log "$1" | tail -20 >&2
  die "$1 did not boot within 60 s"
}

# private_conf FILE: a configuration file the JVMs read and only root writes.
private_conf() {
  : >"$1"
  [ -z "$user" ] || { chgrp "$(id -gn "$user")" "$1"; chmod 0640 "$1"; }
}

write_broker_conf() {
  private_conf "$data/broker.conf"
  cat >"$data/broker.conf" <<CONF
# written by deploy/rocketmq.sh
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=$host
namesrvAddr=$namesrv
listenPort=10911
bindAddress=$bind
autoCreateTopicEnable=true
storePathRootDir=$data/store
storePathCommitLog=$data/store/commitlog
storePathConsumeQueue=$data/store/consumequeue
storePathIndex=$data/store/index
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=300000
deleteWhen=04
fileReservedTime=24
# The timer wheel (RocketMQ 5's timer messages, which shardstock does not
# send) compared and wrote its 604,800 slots (~39 MB) every second: 28% of
# the broker's CPU samples under make bench's full-stack load (make
# profile-fullstack, 2026-12-07). Consumer retries go through the delay
# levels (ScheduleMessageService), which stay on. Off, the broker logs once
# a second that it skips reviving pop messages (pop.log, rotated):
# shardstock's consumers pull, they do not pop.
timerWheelEnable=false
# A pull may return up to 512 messages (default 32, 8 from disk; 256 KiB):
# the order consumer asks for 256 (messaging.ConsumeBatch), and writes them
# in one transaction, as it does in the Streams mode.
maxTransferCountOnMessageInMemory=512
maxTransferBytesOnMessageInMemory=1048576
maxTransferCountOnMessageInDisk=512
maxTransferBytesOnMessageInDisk=1048576
CONF
  if [ "$acl" = on ]; then
    local admin; admin=$(user_of admin)
    cat >>"$data/broker.conf" <<CONF
authenticationEnabled=true
authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationEnabled=true
authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={"username":"$admin","password":"$(secret_of admin)"}
innerClientAuthenticationCredentials={"accessKey":"$admin","secretKey":"$(secret_of admin)"}
CONF
  fi
}

# write_tools_yml: RocketMQ's admin tool reads the admin's credentials from
# its home's conf/tools.yml (mqadmin below; its home is root's, in acl/).
write_tools_yml() {
  mkdir -p "$dir/acl/home/conf"
  printf 'accessKey: %s\nsecretKey: %s\n' "$(user_of admin)" "$(secret_of admin)" >"$dir/acl/home/conf/tools.yml"
}

start_namesrv() {
  if alive namesrv; then echo "namesrv already running (pid $(pid_of namesrv))"; return; fi
  private_conf "$data/namesrv.conf"
  printf '# written by deploy/rocketmq.sh\nlistenPort=9876\nbindAddress=%s\n' "$bind" >"$data/namesrv.conf"
  jvm namesrv 256m org.apache.rocketmq.namesrv.NamesrvStartup rmq.namesrv.logback.xml -c "$data/namesrv.conf"
  wait_boot namesrv
}

start_broker() {
  if alive broker; then echo "broker already running (pid $(pid_of broker))"; return; fi
  write_broker_conf
  jvm broker "$heap" org.apache.rocketmq.broker.BrokerStartup rmq.broker.logback.xml -c "$data/broker.conf"
  wait_boot broker
  apply_acl
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
  start) fetch; wait_gone broker; wait_gone namesrv; layout; start_namesrv; start_broker ;;
  stop) signal_stop broker; signal_stop namesrv
        if [ "${2:-}" = --wait ]; then wait_gone broker; wait_gone namesrv; fi ;;
  start-broker) fetch; wait_gone broker; layout; start_broker ;;
  stop-broker) signal_stop broker; wait_gone broker ;;
  remove) remove ;;
  credentials) [ -n "${2:-}" ] || die "credentials: which role? coordinator, payment or admin"; cat "$(credentials "$2")" ;;
  credentials-file) [ -n "${2:-}" ] || die "credentials-file: which role? coordinator, payment or admin"; credentials "$2" ;;
  url) r=${2:-coordinator}; [ "$r" != admin ] || die "url: coordinator or payment"
       echo "rocketmq://$(cat "$(credentials "$r")")@$namesrv" ;;
  mqadmin) shift; fetch >/dev/null; write_tools_yml
           exec java -Xmx256m -Drocketmq.home.dir="$dir/acl/home" -Duser.home="$dir/acl" -cp "$cache/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@" ;;
  status) for n in namesrv broker; do if alive $n; then echo "$n up pid $(pid_of $n) as ${user:-$(id -un)}"; else echo "$n down"; fi; done ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $1 (see --help)" ;;
esac
