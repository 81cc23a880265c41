#!/usr/bin/env bash
# shardstock on several hosts, on this machine: each part on a host of its
# own, a Linux network namespace with its own address on a private bridge,
# every part listening on and advertising that address (never loopback).
# Root only (as CI runs): namespaces, links and addresses are root's.
#
#   deploy/cluster.sh up [options]     make the hosts and start every part; on a failure, take
#                                      down what it made
#   deploy/cluster.sh down [--purge]   stop every part, then delete the hosts and the bridge
#                                      (also what a failed or killed up left); --purge also
#                                      deletes every part's data, the orders and the keys
#   deploy/cluster.sh status           each host: its address and whether its part runs
#   deploy/cluster.sh hosts            each host's name and address
#   deploy/cluster.sh env              the settings a client needs (edge, coordinators, admin
#                                      token, keys, order database), as NAME='VALUE' lines that
#                                      a shell may source: set -a; . DIR/env; set +a
#   deploy/cluster.sh exec HOST CMD... run CMD on HOST (in its namespace); options before exec
#   deploy/cluster.sh partition HOST PEER[,PEER...]
#                                      cut HOST off from each PEER, both ways, and from no one
#                                      else: their packets to each other are dropped silently
#                                      (as a broken link or a firewall does; no refusal comes
#                                      back), connections already open stall
#   deploy/cluster.sh heal [HOST]      undo every cut (of HOST only, if given)
#   deploy/cluster.sh cpu              each host's CPU time so far (user + system, seconds), summed
#                                      over every process in its namespace
#   deploy/cluster.sh measure [--rate 2000] [--duration 10s]
#                                      the cost of a purchase per host: each host's CPU with no
#                                      buyer for DURATION, then a fresh product bought by loadgen
#                                      --mode steady through the edge for DURATION; what the run
#                                      added over idle, divided by the purchases that reserved
#   deploy/cluster.sh stop-part HOST / start-part HOST
#                                      stop or start the part on HOST (a coordinator: SIGTERM)
#
# The hosts (NET is a /24, its .1 is this machine on the bridge):
#   edge      NET.2   nginx, the buyers' way in, on port 8000
#   prom      NET.3   Prometheus on 9090, scraping the coordinators
#   db        NET.4   MariaDB on 3406 (TLS; its user may log in from the coordinators' hosts and NET.1 only)
#   mq        NET.5   RocketMQ: the NameServer on 9876 and the Broker on 10911
#   coordK    NET.1K  coordinator K on 8080 (K = 1..9)
#   shardK    NET.2K  Redis master K on 6479 (K = 1..9; AOF, appendfsync always, ACL)
#
# Each host's packet filter (nftables, in its namespace) takes connections on its
# ports only from the peers that need them, and refuses anyone else's at once (a TCP
# reset); replies and loopback pass, and what a host sends out is not filtered.
# NET.1, this machine (the operators, the tests, a payment centre), reaches every port:
#   edge 8000 from anyone (the buyers); coordK 8080 from the edge, prom and NET.1;
#   shardK 6479 and db 3406 from the coordinators and NET.1; mq 9876 and 10911 from the
#   coordinators and NET.1 (the Broker's 10909 and its HA port 10912 from no host);
#   prom 9090 from NET.1. NET.1 is every user of this machine: the filter tells hosts
#   apart, not the users or processes of one.
#
# options (or the environment variable in brackets):
#   --shards 3           [SHARDSTOCK_CLUSTER_SHARDS]        Redis masters, one per host (1-9)
#   --coordinators 2     [SHARDSTOCK_CLUSTER_COORDINATORS]  coordinators, one per host (1-9)
#   --net 10.77.0        [SHARDSTOCK_CLUSTER_NET]           the hosts' /24 (three octets)
#   --name ss            [SHARDSTOCK_CLUSTER_NAME]          prefix of the namespaces and links
#                                                           (1-6 letters or digits)
#   --dir run/cluster    [SHARDSTOCK_CLUSTER_DIR]           every part's data, logs and the
#                                                           cluster's keys (DIR/env, mode 0600);
#                                                           default run/cluster of this checkout
#   --bin bin/shardstock [SHARDSTOCK_BIN]                   the coordinator binary (make build)
# The coordinators run with SHARDSTOCK_USER_AUTH=hmac (buyers bring signed
# tokens through the edge), a payment secret (signed payment results only),
# RocketMQ and MariaDB; the keys are made once per DIR. Any other
# SHARDSTOCK_* setting in the environment of `up` reaches them too (for
# example SHARDSTOCK_PAY_TIMEOUT or SHARDSTOCK_LOG_LEVEL). Each coordinator
# runs as the system user shardstock-coordinator from DIR/coordK, which is
# its user's alone; MariaDB, Redis, RocketMQ, Prometheus and nginx's workers
# drop root as their scripts do, each to a system user of its own.
set -Eeuo pipefail
source "$(dirname "$0")/lib.sh"
umask 077
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

shards=${SHARDSTOCK_CLUSTER_SHARDS:-3}
coords=${SHARDSTOCK_CLUSTER_COORDINATORS:-2}
net=${SHARDSTOCK_CLUSTER_NET:-10.77.0}
name=${SHARDSTOCK_CLUSTER_NAME:-ss}
dir=${SHARDSTOCK_CLUSTER_DIR:-$root/run/cluster}
bin=${SHARDSTOCK_BIN:-$root/bin/shardstock}
rate=2000 duration=10s purge=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*"; }

# Options come after the command, or before it (exec takes every word after
# HOST as its command: give exec's options first).
pre=()
while [ $# -gt 0 ] && [[ $1 == --* && $1 != --help ]]; do
  if [ "$1" = --purge ]; then pre+=("$1"); shift; else pre+=("$1" "${2:-}"); shift 2 || { shift; break; }; fi
done
cmd=${1:-}; [ $# -gt 0 ] && shift
case "$cmd" in
  exec) [ $# -ge 2 ] || die "exec HOST CMD..."; exec_host=$1; shift; exec_args=("$@"); set -- ;;
  partition) [ $# -ge 2 ] && [[ $1 != -* && $2 != -* ]] || die "partition HOST PEER[,PEER...]"; cut_host=$1 cut_peers=$2; shift 2 ;;
  heal) heal_host=""; if [ $# -gt 0 ] && [[ $1 != -* ]]; then heal_host=$1; shift; fi ;;
  stop-part|start-part) [ $# -ge 1 ] || die "$cmd HOST"; part_host=$1; shift ;;
esac
set -- "${pre[@]}" "$@"
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --coordinators) coords=$2; shift 2 ;;
    --net) net=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --purge) purge=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case "$cmd" in ""|-h|--help|help) usage; exit 0 ;; esac
[ "$(id -u)" = 0 ] || die "needs root: hosts are network namespaces (ip netns) on a bridge"
# DIR is root's; 0711 when made here, so the parts' users pass through it
# to their own directories (a DIR that exists keeps its mode).
[ -d "$dir" ] || { mkdir -p "$dir"; chmod 711 "$dir"; }
dir=$(cd "$dir" && pwd)

# A cluster that is up keeps its shape in DIR/cluster.conf: every later
# command (down above all) works on what up made, whatever it is told now.
if [ -f "$dir/cluster.conf" ] && [ "$cmd" != up ]; then
  # shellcheck disable=SC1091
  source "$dir/cluster.conf"
fi
[[ $shards =~ ^[1-9]$ ]] || die "--shards must be 1 to 9, not '$shards'"
[[ $coords =~ ^[1-9]$ ]] || die "--coordinators must be 1 to 9, not '$coords'"
[[ $net =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] || die "--net must be three octets such as 10.77.0, not '$net'"
[[ $name =~ ^[a-z0-9]{1,6}$ ]] || die "--name must be 1-6 lower-case letters or digits, not '$name'"

# hosts: every host's name, in the order up starts them.
hosts() {
  local k
  echo db; echo mq
  for ((k = 1; k <= shards; k++)); do echo "shard$k"; done
  for ((k = 1; k <= coords; k++)); do echo "coord$k"; done
  echo edge; echo prom
}
addr() { # host
  case "$1" in
    edge) echo "$net.2" ;; prom) echo "$net.3" ;; db) echo "$net.4" ;; mq) echo "$net.5" ;;
    coord[1-9]) echo "$net.1${1#coord}" ;; shard[1-9]) echo "$net.2${1#shard}" ;;
    *) die "no host '$1' (see: deploy/cluster.sh hosts)" ;;
  esac
}
ns() { echo "$name-$1"; }
bridge() { echo "$name-br"; }
in_host() { local h=$1; shift; ip netns exec "$(ns "$h")" "$@"; }
known() { hosts | grep -x "$1" >/dev/null || die "no host '$1' in this cluster (see: deploy/cluster.sh hosts)"; }

coordinator_urls() { local k out=""; for ((k = 1; k <= coords; k++)); do out="${out:+$out,}$(addr "coord$k"):8080"; done; echo "$out"; }

# secret NAME: a random key kept in DIR/keys/NAME, made the first time.
secret() {
  local f="$dir/keys/$1"
  if [ ! -s "$f" ]; then mkdir -p "$dir/keys"; head -c 32 /dev/urandom | base64 | tr -d '/+=' >"$f"; fi
  cat "$f"
}

# The scripts of the parts, each with its host's directories and address.
redis() { local h=$1; shift; in_host "$h" env SHARDSTOCK_REDIS_DIR="$dir/$h/redis" SHARDSTOCK_REDIS_PORTS=6479 SHARDSTOCK_REDIS_HOST="$(addr "$h")" "$here/redis.sh" "$@"; }
# The database's user logs in from the coordinators' hosts and from this
# machine (NET.1, the operators': reconciliation and audits read the
# orders) only, and the tests' user is not made here.
coordinator_addrs() { local k out=""; for ((k = 1; k <= coords; k++)); do out="${out:+$out,}$(addr "coord$k")"; done; echo "$out"; }
mariadb() { in_host db env SHARDSTOCK_MARIADB_DIR="$dir/db/mariadb" SHARDSTOCK_MARIADB_HOST="$(addr db)" SHARDSTOCK_MARIADB_CLIENTS="$(coordinator_addrs),$net.1" SHARDSTOCK_MARIADB_TEST_USER=0 "$here/mariadb.sh" "$@"; }
rocketmq() { in_host mq env SHARDSTOCK_RMQ_DIR="$dir/mq/rocketmq" SHARDSTOCK_RMQ_BIND="$(addr mq)" "$here/rocketmq.sh" "$@"; }
nginx() { in_host edge "$here/nginx.sh" "$@" --dir "$dir/edge/nginx"; }
prometheus() { in_host prom "$here/prometheus.sh" "$@" --dir "$dir/prom/prometheus"; }

# --- the network -----------------------------------------------------------

make_network() {
  local br; br=$(bridge)
  if ! ip link show "$br" >/dev/null 2>&1; then
    ip link add "$br" type bridge
    ip addr add "$net.1/24" dev "$br"
    ip link set "$br" up
  fi
  local h
  for h in $(hosts); do
    ip netns list | grep -w "$(ns "$h")" >/dev/null && continue
    ip netns add "$(ns "$h")"
    ip link add "$(ns "$h")" type veth peer name eth0 netns "$(ns "$h")"
    ip link set "$(ns "$h")" master "$br" up
    ip -n "$(ns "$h")" addr add "$(addr "$h")/24" dev eth0
    ip -n "$(ns "$h")" link set eth0 up
    ip -n "$(ns "$h")" link set lo up
  done
}

remove_network() {
  local n l
  for n in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true # (what down could not stop)
  done
  # The hosts' links first, each at once: a namespace's deletion takes its
  # links down later, in the kernel's own time.
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$name-" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  for n in $(ip netns list | awk '{print $1}' | grep "^$name-" || true); do ip netns del "$n"; done
}

# cut_link/uncut_link HOST PEER: HOST's packets to PEER go to a hardware address
# nobody has (the bridge floods them, every host drops them), and PEER's to
# HOST likewise: a silent, one-pair partition that needs no packet filter.
nowhere=02:00:5e:00:53:ff
cut_link() { ip -n "$(ns "$1")" neigh replace "$(addr "$2")" lladdr "$nowhere" nud permanent dev eth0; }
uncut_link() { ip -n "$(ns "$1")" neigh del "$(addr "$2")" dev eth0 2>/dev/null || true; }

# firewall HOST: HOST's packet filter, as the top says.
firewall() {
  local h=$1 ports from coordinators saddr
  coordinators=$(coordinator_addrs)
  case "$h" in
    edge) ports=8000 from="" ;;
    coord*) ports=8080 from="$(addr edge),$(addr prom),$net.1" ;;
    shard*) ports=6479 from="$coordinators,$net.1" ;;
    db) ports=3406 from="$coordinators,$net.1" ;;
    mq) ports="9876, 10911" from="$coordinators,$net.1" ;; # (not 10909 nor the HA port 10912, an unauthenticated copy of the log: no peer needs them)
    prom) ports=9090 from="$net.1" ;;
  esac
  saddr=""
  [ -z "$from" ] || saddr="ip saddr { ${from//,/, } }"
  in_host "$h" nft -f - <<NFT
table inet shardstock
delete table inet shardstock
table inet shardstock {
  chain input {
    type filter hook input priority filter; policy drop;
    iif lo accept
    ct state established,related accept
    ct state invalid drop
    meta l4proto { icmp, ipv6-icmp } accept
    tcp dport { $ports } $saddr accept
    meta l4proto tcp counter reject with tcp reset
    counter reject
  }
}
NFT
}

partition() {
  known "$cut_host"
  local p peers; IFS=, read -r -a peers <<<"$cut_peers"
  for p in "${peers[@]}"; do
    known "$p"; [ "$p" != "$cut_host" ] || die "a host is not cut off from itself"
    cut_link "$cut_host" "$p"; cut_link "$p" "$cut_host"
    grep -qx "$cut_host $p" "$dir/partitions" 2>/dev/null || echo "$cut_host $p" >>"$dir/partitions"
    say "partition: $cut_host ($(addr "$cut_host")) and $p ($(addr "$p")) no longer reach each other"
  done
}

heal() {
  [ -s "$dir/partitions" ] || { say "heal: no partition"; return; }
  local a b keep=""
  while read -r a b; do
    if [ -n "$heal_host" ] && [ "$a" != "$heal_host" ] && [ "$b" != "$heal_host" ]; then keep="$keep$a $b"$'\n'; continue; fi
    uncut_link "$a" "$b"; uncut_link "$b" "$a"
    say "heal: $a and $b reach each other again"
  done <"$dir/partitions"
  printf '%s' "$keep" >"$dir/partitions"
}

# --- the coordinators ------------------------------------------------------

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
coordinator_user() { service_user shardstock-coordinator; }
# coord_pid HOST: the coordinator's pid, from a file only root writes
# (DIR/pids), and only while that pid is a process of the coordinators'
# user (after a reboot or a killed run the number may be anyone's).
coord_pid() {
  local p; p=$(cat "$dir/pids/$1.pid" 2>/dev/null || true)
  [[ $p =~ ^[0-9]+$ ]] || return 0
  [ "$(awk '/^Uid:/ {print $2}' "/proc/$p/status" 2>/dev/null)" = "$(id -u "$(coordinator_user)")" ] && echo "$p"
  return 0
}

# start_coordinator HOST: DIR/HOST is root's (0711) and holds the binary,
# the broker's credentials and the database's CA (readable by the
# coordinators' group); only spool/ and log/ are the coordinator's. It
# starts there as its user (paths relative to it: the user needs no way
# through DIR's parents), in HOST's namespace, without capabilities, and
# opens its log itself: root writes nothing into a directory of the
# coordinator's and follows no link it could have planted there.
start_coordinator() {
  local h=$1 d=$dir/$1 user group pid
  pid=$(coord_pid "$h")
  if [ -n "$pid" ] && running "$pid"; then say "$h already running (pid $pid)"; return; fi
  user=$(coordinator_user); group=$(id -gn "$user")
  install -d -o root -g root -m 0711 "$d"
  install -d -o root -g root -m 0700 "$dir/pids"
  [ -d "$d/spool" ] || install -d -o "$user" -g "$group" -m 0700 "$d/spool"
  [ -d "$d/log" ] || install -d -o "$user" -g "$group" -m 0700 "$d/log"
  install -o root -g root -m 0755 "$bin" "$d/shardstock"
  install -o root -g "$group" -m 0640 "$(rocketmq credentials-file coordinator)" "$d/mq.credentials"
  install -o root -g "$group" -m 0640 "$(mariadb ca)" "$d/db-ca.crt"
  (
    cd "$d"
    export SHARDSTOCK_HTTP_ADDR="$(addr "$h"):8080" SHARDSTOCK_SHARDS="$(shard_urls)" \
      SHARDSTOCK_ADMIN_TOKEN="$(secret admin-token)" SHARDSTOCK_USER_AUTH=hmac SHARDSTOCK_HMAC_SECRET="$(secret hmac)" \
      SHARDSTOCK_PAYMENT_SECRET="$(secret payment)" SHARDSTOCK_TRUSTED_PROXIES="$(addr edge)/32" \
      SHARDSTOCK_MQ="rocketmq://$(addr mq):9876" SHARDSTOCK_DB="$(mariadb dsn)" SHARDSTOCK_DB_CA_FILE=db-ca.crt \
      SHARDSTOCK_SPOOL_DIR=spool
    unset SHARDSTOCK_DEV
    nohup ip netns exec "$(ns "$h")" setpriv --reuid="$user" --regid="$group" --clear-groups --no-new-privs \
      --inh-caps=-all --bounding-set=-all \
      sh -c 'exec ./shardstock serve --mq-credentials-file mq.credentials >>log/shardstock.log 2>&1' >/dev/null 2>&1 &
    echo $! >"$dir/pids/$h.pid"
  )
  pid=$(cat "$dir/pids/$h.pid")
  for _ in $(seq 1 1200); do # 60 s: a fresh broker's routes take a while
    running "$pid" || { coordinator_log "$h" >&2; die "$h exited during start (log: $d/log/shardstock.log)"; }
    if curl -fsS -o /dev/null "http://$(addr "$h"):8080/readyz" 2>/dev/null; then
      say "$h up on $(addr "$h"):8080 (pid $pid, as $user, log $d/log/shardstock.log)"; return
    fi
    sleep 0.05
  done
  coordinator_log "$h" >&2
  die "$h not ready within 60 s (log: $d/log/shardstock.log)"
}

# coordinator_log HOST: the end of its log, read as its user (the file is
# the coordinator's: it may be a link to something only root may read).
coordinator_log() { runuser -u "$(coordinator_user)" -- tail -20 "$dir/$1/log/shardstock.log" 2>/dev/null || true; }

stop_coordinator() {
  local h=$1 pid; pid=$(coord_pid "$h")
  [ -n "$pid" ] && running "$pid" || { rm -f "$dir/pids/$h.pid"; return 0; }
  kill -TERM "$pid"
  for _ in $(seq 1 300); do running "$pid" || { rm -f "$dir/pids/$h.pid"; say "$h stopped"; return; }; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$dir/pids/$h.pid"
  say "$h killed after 30 s"
}

shard_urls() { local k out=""; for ((k = 1; k <= shards; k++)); do out="${out:+$out,}$(redis "shard$k" urls)"; done; echo "$out"; }

# --- the parts -------------------------------------------------------------

start_part() {
  case "$1" in
    db) mariadb start ;;
    mq) rocketmq start ;;
    shard*) redis "$1" start ;;
    coord*) start_coordinator "$1" ;;
    # The edge verifies buyers' tokens with the coordinators' key; the load
    # of this machine's load generator comes from one address (NET.1),
    # which the per-address rate would hold to a trickle.
    edge) SHARDSTOCK_HMAC_SECRET="$(secret hmac)" nginx start --listen "$(addr edge)" --port 8000 --upstreams "$(coordinator_urls)" --ops-allow "$net.1/32" --rate-per-ip 100000 ;;
    prom) prometheus start --listen "$(addr prom)" --targets "$(coordinator_urls)" ;;
  esac
}

stop_part() {
  case "$1" in
    db) mariadb stop ;;
    mq) rocketmq stop --wait ;;
    shard*) redis "$1" stop ;;
    coord*) stop_coordinator "$1" ;;
    edge) nginx stop ;;
    prom) prometheus stop ;;
  esac
}

part_status() {
  case "$1" in
    db) mariadb status ;;
    mq) rocketmq status | tr '\n' ' '; echo ;;
    shard*) redis "$1" status ;;
    coord*) local p; p=$(coord_pid "$1"); if [ -n "$p" ] && running "$p"; then echo "coordinator up pid $p"; else echo "coordinator down"; fi ;;
    edge) if curl -s -o /dev/null "http://$(addr edge):8000/healthz"; then echo "edge answers on :8000"; else echo "edge down"; fi ;;
    prom) if curl -sf -o /dev/null "http://$(addr prom):9090/-/ready"; then echo "prometheus up on :9090"; else echo "prometheus down"; fi ;;
  esac
}

# cpu_ticks HOST: the CPU time (clock ticks, user + system) of every
# process in HOST's namespace: on these hosts, that is the part.
cpu_ticks() {
  local p sum=0 t
  for p in $(ip netns pids "$(ns "$1")" 2>/dev/null); do
    t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || continue
    sum=$((sum + ${t:-0}))
  done
  echo "$sum"
}

measure() {
  [[ $rate =~ ^[0-9]+$ ]] || die "--rate must be a whole number of purchases a second"
  [[ $duration =~ ^([0-9]+)s$ ]] || die "--duration must be whole seconds, such as 10s"
  local secs=${BASH_REMATCH[1]}
  set -a; . "$dir/env"; set +a
  local product h hz out reserved
  hz=$(getconf CLK_TCK)
  product="measure$(date +%s)"
  curl -fsS -o /dev/null -X PUT -H "Authorization: Bearer $SHARDSTOCK_ADMIN_TOKEN" -H 'Content-Type: application/json' \
    -d "{\"stock\":10000000,\"per_user_limit\":1}" "$SHARDSTOCK_CLUSTER_EDGE/admin/v1/products/$product" || die "could not define $product"
  sleep 2 # (every coordinator has the product)
  # What each host spends with no buyer at all (the JVMs, MariaDB's and the
  # coordinators' background work), over as long as the run: the figure per
  # purchase is what the run adds to it.
  declare -A idle busy
  for h in $(hosts); do idle[$h]=$(cpu_ticks "$h"); done
  sleep "$secs"
  for h in $(hosts); do idle[$h]=$(( $(cpu_ticks "$h") - ${idle[$h]} )); busy[$h]=$(cpu_ticks "$h"); done
  out=$("$bin" loadgen --url "$SHARDSTOCK_CLUSTER_EDGE" --product "$product" --mode steady --rate "$rate" --duration "$duration" \
    --buyers 100000000 --conns 64 --progress=false)
  for h in $(hosts); do busy[$h]=$(( $(cpu_ticks "$h") - ${busy[$h]} )); done
  echo "$out" | grep -E '^mode|^statuses'
  reserved=$(echo "$out" | grep -oE '(^| )200×[0-9]+' | grep -oE '[0-9]+$' || echo 0)
  [ "${reserved:-0}" -gt 0 ] || die "no purchase reserved: see the statuses above"
  echo "per host: idle CPU (cores), and the CPU a purchase that reserved added ($reserved of them, ${secs} s; a tick is $((1000000 / hz)) µs):"
  for h in $(hosts); do
    printf '  %-7s idle %5.2f cores   %7.1f µs per purchase\n' "$h" "$(echo "${idle[$h]} / $hz / $secs" | bc -l)" \
      "$(echo "(${busy[$h]} - ${idle[$h]}) * 1000000 / $hz / $reserved" | bc -l)"
  done
}

# write_env: the settings a client needs, one NAME='VALUE' a line (a shell
# may source the file: set -a; . DIR/env).
write_env() {
  local k list=""
  for ((k = 1; k <= coords; k++)); do list="${list:+$list,}http://$(addr "coord$k"):8080"; done
  {
    printf "SHARDSTOCK_CLUSTER_EDGE='%s'\n" "http://$(addr edge):8000"
    printf "SHARDSTOCK_CLUSTER_COORDINATOR_URLS='%s'\n" "$list"
    printf "SHARDSTOCK_CLUSTER_PROMETHEUS='%s'\n" "http://$(addr prom):9090"
    printf "SHARDSTOCK_ADMIN_TOKEN='%s'\n" "$(secret admin-token)"
    printf "SHARDSTOCK_HMAC_SECRET='%s'\n" "$(secret hmac)"
    printf "SHARDSTOCK_PAYMENT_SECRET='%s'\n" "$(secret payment)"
    printf "SHARDSTOCK_DB='%s'\n" "$(mariadb dsn)"
    printf "SHARDSTOCK_DB_CA_FILE='%s'\n" "$(mariadb ca)"
  } >"$dir/env"
}

up() {
  [ -x "$bin" ] || die "no coordinator binary at $bin: make build (or --bin PATH)"
  command -v curl >/dev/null || apt_install -- curl
  [ ! -f "$dir/cluster.conf" ] || die "a cluster is up from $dir: deploy/cluster.sh down first"
  ! ip link show "$(bridge)" >/dev/null 2>&1 || die "the bridge $(bridge) exists already: another cluster named '$name' is up (--name)"
  ! ip -o -4 addr show | grep "inet ${net//./\\.}\\." >/dev/null || die "$net.0/24 is in use on this machine: choose another --net"
  printf 'shards=%s\ncoords=%s\nnet=%s\nname=%s\nbin=%q\n' "$shards" "$coords" "$net" "$name" "$bin" >"$dir/cluster.conf"
  trap 'rc=$?; trap - EXIT; if [ "$rc" != 0 ]; then echo "cluster.sh: up failed; taking down what it made" >&2; down; fi; exit "$rc"' EXIT
  # What the parts need from the network outside (Debian's packages, the
  # broker's jars from Maven Central) comes before the hosts: they have no
  # way out.
  SHARDSTOCK_REDIS_DIR="$dir/install/redis" "$here/redis.sh" install
  SHARDSTOCK_MARIADB_DIR="$dir/install/mariadb" "$here/mariadb.sh" install
  SHARDSTOCK_RMQ_DIR="$dir/install/rocketmq" "$here/rocketmq.sh" fetch
  "$here/nginx.sh" install --dir "$dir/install/nginx"
  "$here/prometheus.sh" install --dir "$dir/install/prometheus"
  command -v nft >/dev/null || apt_install -- nftables
  rm -rf "$dir/install"
  make_network
  say "$((shards + coords + 4)) hosts on bridge $(bridge) ($net.1 is this machine)"
  local h
  for h in $(hosts); do firewall "$h"; done
  say "each host takes connections on its ports only from the peers that need them (nftables; deploy/cluster.sh --help)"
  for h in $(hosts); do say "starting $h ($(addr "$h"))"; start_part "$h"; done
  trap - EXIT
  write_env
  : >"$dir/partitions"
  say "up: buyers at http://$(addr edge):8000, the operators at $(coordinator_urls | cut -d, -f1)/admin/ (token in $dir/env), Prometheus at http://$(addr prom):9090"
}

down() {
  local h list
  list=$(hosts | tac)
  if ip link show "$(bridge)" >/dev/null 2>&1; then
    [ ! -s "$dir/partitions" ] || heal_host="" heal >/dev/null
    for h in $list; do
      ip netns list | grep -w "$(ns "$h")" >/dev/null || continue
      stop_part "$h" || echo "cluster.sh: stopping $h failed; its processes are killed with its host" >&2
    done
  fi
  remove_network
  rm -rf "$dir/pids"
  rm -f "$dir/cluster.conf" "$dir/partitions"
  if [ -n "$purge" ]; then
    # MariaDB's files may live outside DIR (mariadb.sh: "Where the files are").
    [ ! -d "$dir/db/mariadb" ] || SHARDSTOCK_MARIADB_DIR="$dir/db/mariadb" "$here/mariadb.sh" remove >/dev/null
    [ ! -d "$dir/mq/rocketmq" ] || SHARDSTOCK_RMQ_DIR="$dir/mq/rocketmq" "$here/rocketmq.sh" remove >/dev/null # (likewise)
    rm -rf "$dir"
    say "down: every part stopped, hosts and bridge $(bridge) removed, and every part's data deleted ($dir)"
    return
  fi
  say "down: every part stopped, hosts and bridge $(bridge) removed (data kept in $dir)"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  status) for h in $(hosts); do printf '%-7s %-12s %s\n' "$h" "$(addr "$h")" "$(part_status "$h" 2>&1 | tr '\n' ' ')"; done ;;
  hosts) for h in $(hosts); do echo "$h $(addr "$h")"; done ;;
  env) [ -f "$dir/env" ] || die "no cluster is up from $dir"; cat "$dir/env" ;;
  exec) known "$exec_host"; in_host "$exec_host" "${exec_args[@]}" ;;
  partition) partition ;;
  heal) [ -z "$heal_host" ] || known "$heal_host"; heal ;;
  cpu) command -v bc >/dev/null || apt_install -- bc; hz=$(getconf CLK_TCK); for h in $(hosts); do printf '%-7s %s\n' "$h" "$(echo "scale=2; $(cpu_ticks "$h") / $hz" | bc)"; done ;;
  measure) [ -f "$dir/env" ] || die "no cluster is up from $dir"; command -v bc >/dev/null || apt_install -- bc; measure ;;
  stop-part) known "$part_host"; stop_part "$part_host" ;;
  start-part) known "$part_host"; start_part "$part_host" ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
