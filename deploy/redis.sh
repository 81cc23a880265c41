#!/usr/bin/env bash
# Run shardstock's stock shards: N independent redis-server masters (no
# replicas), each on its own port with its own data dir and AOF on.
#
#   deploy/redis.sh install                 install redis-server from Debian if missing
#
# Started as root, each master runs as the system user shardstock-redis
# (created once), never as root, in its data dir DIR/PORT (mode 0700, its
# own), reading its configuration DIR/PORT.conf (root's, 0600: it holds the
# passwords) from its standard input; otherwise as you.
#   deploy/redis.sh start  [options]        start the masters, wait until each answers PING
#   deploy/redis.sh stop   [options]        shut them down (SHUTDOWN, then SIGKILL if needed)
#   deploy/redis.sh kill   [options]        SIGKILL them (a crash: nothing answered is lost with
#                                           fsync always; with everysec up to ~2 s may be)
#   deploy/redis.sh freeze [options]        SIGSTOP them (a hung shard); thaw: SIGCONT
#   deploy/redis.sh wipe   [options]        SIGKILL, delete the data (AOF), start empty: a shard that lost its data
#   deploy/redis.sh status [options]        print each master's port, pid and state
#   deploy/redis.sh urls   [options]        print the SHARDSTOCK_SHARDS value for them (as the coordinators' user)
#   deploy/redis.sh payments-url [options]  print the payment centre's URLs (see Access)
#   deploy/redis.sh cli PORT [ARGS...]      redis-cli on master PORT as the admin user (options
#                                           from the environment only)
#
# options (or the environment variable in brackets):
#   --ports 6479,6579,6679   [SHARDSTOCK_REDIS_PORTS]  one master per port
#   --host 127.0.0.1         [SHARDSTOCK_REDIS_HOST]   the address the masters listen on and urls
#                            names: this host's address on the network the coordinators reach
#                            it by (deploy/cluster.sh gives each shard host its own)
#   --dir ./run/redis        [SHARDSTOCK_REDIS_DIR]    data dirs: DIR/PORT/
#   --fsync always|everysec  [SHARDSTOCK_REDIS_FSYNC]  AOF fsync policy, default always (see DESIGN.md:
#                            Persistence). everysec answers writes it has not handed to the
#                            kernel yet while a background fsync is slow, so even a SIGKILL
#                            loses answered purchases and the claims of the per-user limit
#   --acl-user NAME:PASS     [SHARDSTOCK_REDIS_ACL_USER] the coordinators' user name and password,
#                            instead of shardstock and a random password
#   --open                   [SHARDSTOCK_REDIS_OPEN=1] no ACL: the default user may run every
#                            command on every key (the test suite's masters, on loopback)
#   --requirepass PASS       [SHARDSTOCK_REDIS_PASSWORD] with --open: the default user's password
#   --tls-dir DIR            [SHARDSTOCK_REDIS_TLS_DIR] TLS only: DIR/server.crt, DIR/server.key and
#                            DIR/ca.crt; no plain port; urls prints rediss:// (shardstock then needs
#                            SHARDSTOCK_REDIS_CA_FILE=DIR/ca.crt unless the CA is a system root)
#
# Access: unless --open, the default user cannot be logged in as (its
# password is a hash of random bytes; it keeps its rights only because
# Redis 7.0 replays the AOF as that user) and three ACL users share the
# masters of DIR, each with a random password made once and kept in
# DIR/users/NAME.password (mode 0600):
#   shardstock  the coordinators: data commands (read, write, streams,
#               EVALSHA and SCRIPT LOAD of our scripts, TIME, INFO) on keys
#               ss:* only; no admin or dangerous command (FLUSHALL, KEYS,
#               CONFIG, DEBUG, SHUTDOWN, ...), no SCRIPT FLUSH or KILL, no
#               FUNCTION, no pub/sub
#   payments    a payment centre: XADD to ss:payments, and nothing else
#   admin       this script and the operator (`redis.sh cli`): everything
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077

ports=${SHARDSTOCK_REDIS_PORTS:-6479,6579,6679}
host=${SHARDSTOCK_REDIS_HOST:-127.0.0.1}
dir=${SHARDSTOCK_REDIS_DIR:-./run/redis}
fsync=${SHARDSTOCK_REDIS_FSYNC:-always}
requirepass=${SHARDSTOCK_REDIS_PASSWORD:-}
acluser=${SHARDSTOCK_REDIS_ACL_USER:-}
open=${SHARDSTOCK_REDIS_OPEN:-}
tlsdir=${SHARDSTOCK_REDIS_TLS_DIR:-}

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "redis.sh: $*" >&2; exit 1; }

cmd=${1:-}; [ $# -gt 0 ] && shift
# cli PORT ARGS...: the arguments are redis-cli's (options come from the environment).
if [ "$cmd" = cli ]; then [ $# -gt 0 ] || die "cli needs a port"; cli_port=$1; shift; cli_args=("$@"); set --; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --ports) ports=$2; shift 2 ;;
    --host) host=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --fsync) fsync=$2; shift 2 ;;
    --requirepass) requirepass=$2; shift 2 ;;
    --acl-user) acluser=$2; shift 2 ;;
    --open) open=1; shift ;;
    --tls-dir) tlsdir=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $host =~ ^[0-9.]+$|^[0-9a-fA-F:]+$ ]] && [ "$host" != 0.0.0.0 ] && [ "$host" != :: ] ||
  die "--host must be one IP address of this host (the URLs name it), not '$host'"
case "$fsync" in everysec|always) ;; *) die "--fsync must be everysec or always, not $fsync" ;; esac
[ -n "$open" ] && [ -n "$acluser" ] && die "--open and --acl-user exclude each other"
case "${acluser%%:*}" in default|admin|payments) die "--acl-user: '${acluser%%:*}' is one of the users redis.sh makes; name the coordinators' user otherwise" ;; esac
[ -z "$open" ] && [ -n "$requirepass" ] && die "--requirepass is the default user's password; without --open nobody may log in as that user"
IFS=, read -r -a port_list <<<"$ports"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

install() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return
  echo "redis.sh: installing redis-server from Debian"
  apt_install redis-server -- redis-server redis-tools
}

# pidof_port: the master's pid from its pid file. Run as root, the file is
# in a directory the masters' OS user may write to, so its word is taken
# only for a process of that user (or, if root wrote the file, a master an
# earlier version started as root): a master that was broken into cannot
# make this script signal another process (kill -9 -1: every process).
pidof_port() {
  local f="$dir/$1/redis.pid" pid
  [ -f "$f" ] && [ ! -L "$f" ] || return 0
  pid=$(head -c 20 "$f" | tr -d '[:space:]')
  case "$pid" in ''|*[!0-9]*|0|1) return 0 ;; esac
  if [ "$(id -u)" = 0 ] && [ "$(stat -c %u "$f")" != 0 ]; then
    [ "$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" = "$(stat -c %u "$f")" ] || return 0
  fi
  echo "$pid"
}
# running: some thread of the process is still alive. A daemonized redis
# may be reaped late, or never, when PID 1 does not reap orphans, so a
# zombie counts as gone; but after a SIGKILL the main thread can be a zombie
# while a background thread still finishes a slow fsync, and the process
# keeps its files (the listening port too) until the last thread is gone.
running() {
  local t
  [ -d "/proc/$1/task" ] || { kill -0 "$1" 2>/dev/null; return; }
  for t in /proc/"$1"/task/*/stat; do
    [ -e "$t" ] && ! grep -q '^[0-9]* ([^)]*) [ZX]' "$t" 2>/dev/null && return 0
  done
  return 1
}
alive() { local pid; pid=$(pidof_port "$1"); [ -n "$pid" ] && running "$pid"; }

# conf PORT: the master's configuration file, in DIR (root's when run as
# root, and never the master's: its passwords are none of its business).
conf() { echo "$dir/$1.conf"; }

write_conf() { # port
  local d="$dir/$1" c; c=$(conf "$1")
  mkdir -p "$d"
  rm -f "$d/redis.conf" # (where earlier versions kept it)
  # Written 0600 from the start: the password goes into it below.
  rm -f "$c"
  (umask 077 && : >"$c")
  cat >>"$c" <<CONF
# written by deploy/redis.sh — one independent stock shard, no replicas
port $(if [ -n "$tlsdir" ]; then echo 0; else echo "$1"; fi)
bind $host
protected-mode yes
daemonize yes
# Paths are relative: redis-server starts in $d (as its own OS user when
# this script runs as root, which then needs no way through the parents).
pidfile redis.pid
logfile redis.log
dir .
# Durability: the AOF is the shard's record of every reserve/confirm/release.
appendonly yes
appendfsync $fsync
save ""
# Stock keys must never be evicted: refuse writes when memory is full instead.
maxmemory-policy noeviction
CONF
  if [ -n "$tlsdir" ]; then
    printf 'tls-port %s\ntls-cert-file tls/server.crt\ntls-key-file tls/server.key\ntls-ca-cert-file tls/ca.crt\ntls-auth-clients no\n' \
      "$1" >>"$c"
  fi
  if [ -n "$open" ]; then
    if [ -n "$requirepass" ]; then echo "requirepass $requirepass" >>"$c"; fi
  else
    # The default user keeps every command, behind a password nobody knows
    # (only a hash of random bytes is written): Redis 7.0 replays the AOF's
    # MULTI blocks, which are our scripts' writes, as the default user, so
    # with that user off or restricted a restart silently drops them
    # (redis/redis#14541, fixed after 7.0.15; valkey-io/valkey#3983).
    # Connections that do not log in as one of the users below get NOAUTH.
    # ACL rules apply left to right: after the data categories, -@dangerous
    # takes FLUSHALL, FLUSHDB, KEYS, SORT, RESTORE, MIGRATE and INFO back out,
    # -@scripting every FUNCTION (FUNCTION FLUSH is a write); then the script
    # calls we make, TIME and INFO (memory and persistence figures) go back in.
    cat >>"$c" <<CONF
user default on #$(head -c 32 /dev/urandom | sha256sum | cut -d' ' -f1) ~* &* +@all
user $(coordinator) on >$(coordinator_pass) resetkeys ~ss:* resetchannels -@all +@read +@write +@connection +@transaction -@dangerous -@admin -@scripting -@pubsub +evalsha +eval +script|load +script|exists +time +info
user payments on >$(password payments) resetkeys ~ss:payments resetchannels -@all +xadd +ping +hello
user admin on >$(password admin) ~* &* +@all
CONF
  fi
  chmod 600 "$c"
}

# password NAME: user NAME's password, random, made once per DIR.
password() {
  local f="$dir/users/$1.password"
  if [ ! -s "$f" ]; then
    mkdir -p "$dir/users"
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f")
  fi
  cat "$f"
}
coordinator() { if [ -n "$acluser" ]; then echo "${acluser%%:*}"; else echo shardstock; fi; }
coordinator_pass() { if [ -n "$acluser" ]; then echo "${acluser#*:}"; else password shardstock; fi; }

# hostport PORT: HOST:PORT, an IPv6 address in brackets.
hostport() { if [[ $host == *:* ]]; then echo "[$host]:$1"; else echo "$host:$1"; fi; }

# urls USER PASS: the masters' URLs for a user.
urls() {
  local scheme=redis out= cred=
  [ -n "$tlsdir" ] && scheme=rediss
  [ -n "$open" ] || cred="$1:$2@"
  for p in "${port_list[@]}"; do out="${out:+$out,}$scheme://${cred}$(hostport "$p")/0"; done
  echo "$out"
}

# cli runs redis-cli against a master: as admin, or with --open as the
# default user (with its password, if any). The password goes by the
# environment, never the command line (ps shows that to every user).
cli() {
  local p=$1; shift
  if [ -n "$tlsdir" ]; then set -- --tls --cacert "$tlsdir/ca.crt" "$@"; fi
  if [ -n "$open" ]; then
    REDISCLI_AUTH="$requirepass" redis-cli -h "$host" -p "$p" "$@"
  else
    REDISCLI_AUTH="$(password admin)" redis-cli --user admin -h "$host" -p "$p" "$@"
  fi
}

# quiet drops redis-server's notice that it reads its configuration from
# standard input (errors in it still show).
quiet() { grep -v 'Reading config from stdin' || true; }

# as_user USER CMD...: CMD as USER ("": as we are), without root's
# environment (its secrets stay root's) and never to gain privileges.
as_user() {
  local user=$1; shift
  if [ -z "$user" ]; then "$@"; return; fi
  setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --no-new-privs --reset-env "$@"
}

start_one() { # port
  if alive "$1"; then echo "shard :$1 already running (pid $(pidof_port "$1"))"; return; fi
  write_conf "$1"
  local d="$dir/$1" user c; user=$(service_user shardstock-redis); c=$(conf "$1")
  if [ -n "$user" ]; then
    # The master's files are its user's alone, also those a restore copied
    # in as root (chown and chmod -R follow no symbolic link). From here on
    # root writes nothing into its directory: the master may have planted
    # links there, so the TLS files are written by its user.
    chown -R "$user:$(id -gn "$user")" "$d"
    chmod -R go-rwx "$d"
  fi
  if [ -n "$tlsdir" ]; then
    tar -C "$tlsdir" -cf - server.crt server.key ca.crt |
      (cd "$d" && as_user "$user" sh -c 'umask 077 && rm -rf tls && mkdir tls && tar -C tls --no-same-owner -xf -')
  fi
  # It reads its configuration (the passwords) from its standard input.
  (cd "$d" && as_user "$user" redis-server - <"$c" 2>&1 | quiet)
  for _ in $(seq 1 100); do
    if [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; then
      echo "shard $(hostport "$1") up (pid $(pidof_port "$1"), data $dir/$1, appendfsync $fsync, as ${user:-$(id -un)})"; return
    fi
    sleep 0.05
  done
  [ -L "$dir/$1/redis.log" ] || tail -5 "$dir/$1/redis.log" >&2 || true
  die "shard :$1 did not answer PING within 5 s"
}

stop_one() { # port
  alive "$1" || { echo "shard :$1 not running"; return; }
  local pid; pid=$(pidof_port "$1")
  cli "$1" shutdown >/dev/null 2>&1 || true
  for _ in $(seq 1 100); do running "$pid" || { echo "shard :$1 stopped"; return; }; sleep 0.05; done
  kill -9 "$pid" 2>/dev/null || true
  echo "shard :$1 killed after SHUTDOWN timed out"
}

kill_one() { # port
  alive "$1" || { echo "shard :$1 not running"; return; }
  local pid; pid=$(pidof_port "$1")
  kill -9 "$pid"
  while running "$pid"; do sleep 0.01; done
  echo "shard :$1 SIGKILLed (pid $pid)"
}

signal_one() { # signal port
  alive "$2" || { echo "shard :$2 not running"; return; }
  kill "-$1" "$(pidof_port "$2")"
  echo "shard :$2 sent SIG$1"
}

case "$cmd" in
  install) install ;;
  start) install; for p in "${port_list[@]}"; do start_one "$p"; done ;;
  stop) for p in "${port_list[@]}"; do stop_one "$p"; done ;;
  kill) for p in "${port_list[@]}"; do kill_one "$p"; done ;;
  wipe) for p in "${port_list[@]}"; do
          kill_one "$p"; rm -rf "$dir/$p/appendonlydir" "$dir/$p"/*.rdb; echo "shard :$p data deleted"; start_one "$p"
        done ;;
  freeze) for p in "${port_list[@]}"; do signal_one STOP "$p"; done ;;
  thaw) for p in "${port_list[@]}"; do signal_one CONT "$p"; done ;;
  status) for p in "${port_list[@]}"; do
            if alive "$p"; then echo "shard :$p up pid $(pidof_port "$p")"; else echo "shard :$p down"; fi
          done ;;
  urls) urls "$(coordinator)" "$(coordinator_pass)" ;;
  payments-url) [ -z "$open" ] || die "--open masters have no payments user"; urls payments "$(password payments)" ;;
  cli) cli "$cli_port" "${cli_args[@]}" ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
