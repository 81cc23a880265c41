#!/usr/bin/env bash
# Run Prometheus (Debian's package, not its system service) scraping
# shardstock with deploy/prometheus/rules.yml loaded.
#
#   deploy/prometheus.sh install                         install prometheus (with promtool) if missing
#   deploy/prometheus.sh check                           promtool: check the config and rules, run the rule tests
#   deploy/prometheus.sh start [--targets H:P,...] [--port 9090] [--listen 127.0.0.1] [--dir DIR] [--interval 5s]
#   deploy/prometheus.sh stop  [--dir DIR]
#
# defaults: targets 127.0.0.1:8080, port 9090 on 127.0.0.1 (--listen: this host's address), dir ./run/prometheus
# As root (CI), Prometheus runs as the system user shardstock-prometheus (made once),
# from DIR with relative paths: its time series in DIR/data are that user's alone; its
# configuration, log and pid file are root's (the configuration readable by the user).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
targets=127.0.0.1:8080 port=9090 listen=127.0.0.1 dir=./run/prometheus interval=5s
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "prometheus.sh: $*" >&2; exit 1; }
cmd=${1:-}; [ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --targets) targets=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)

install() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return
  echo "prometheus.sh: installing prometheus from Debian"
  apt_install prometheus prometheus-node-exporter -- prometheus
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }

# pid: Prometheus's pid on record, if its process is still the user's (a
# stale pid file never makes root signal another process).
pid() {
  local p want; p=$(cat "$dir/prometheus.pid" 2>/dev/null) || return 0
  want=$(id -u "$(service_user shardstock-prometheus)" 2>/dev/null || id -u)
  [ -n "$p" ] && [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$want" ] && running "$p" && echo "$p" || true
}

start() {
  install
  if [ -n "$(pid)" ]; then echo "prometheus already running (pid $(pid))"; return; fi
  local list
  list=$(echo "$targets" | sed 's/[^,][^,]*/"&"/g')
  cp "$here/prometheus/rules.yml" "$dir/rules.yml"
  cat >"$dir/prometheus.yml" <<CONF
# written by deploy/prometheus.sh from deploy/prometheus/
global: {scrape_interval: $interval, evaluation_interval: $interval}
rule_files: [rules.yml]
scrape_configs:
  - job_name: shardstock
    static_configs: [{targets: [$list]}]
CONF
  local user drop=() group
  user=$(service_user shardstock-prometheus) # ("" unless root)
  if [ -z "$user" ]; then
    mkdir -p "$dir/data"
  else
    group=$(id -gn "$user")
    # DIR is root's alone (a link planted in it would send what follows
    # elsewhere); its group lets the user in, to its files by name.
    [ "$(stat -c %u "$dir")" = 0 ] && [ -z "$(find "$dir" -maxdepth 0 -perm /022)" ] ||
      die "$dir must be root's and writable by root alone"
    chgrp "$group" "$dir" "$dir/prometheus.yml" "$dir/rules.yml"
    chmod g+x "$dir"; chmod 0640 "$dir/prometheus.yml" "$dir/rules.yml"
    # The time series are the user's, made so once: root never walks them
    # again (the user could have planted links or hard links there by
    # then), but those a run as root wrote.
    if [ ! -e "$dir/data" ]; then
      command install -d -o "$user" -g "$group" -m 0700 "$dir/data" # (the program, not this script's install)
    elif [ "$(stat -c %u "$dir/data")" = 0 ]; then
      chown -R "$user:$group" "$dir/data"; chmod -R go-rwx "$dir/data"
    fi
    # (--reset-env: root's environment, its secrets among it, stays root's)
    drop=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --no-new-privs --reset-env)
  fi
  # From DIR, by relative paths: a directory on the way to DIR may be
  # closed to the user. In a session of its own: no terminal of the
  # operator's to type into.
  (cd "$dir" || exit
    "${drop[@]}" setsid nohup prometheus --config.file=prometheus.yml --storage.tsdb.path=data \
      --web.listen-address="$listen:$port" </dev/null >"$dir/prometheus.log" 2>&1 &
    echo $! >"$dir/prometheus.pid")
  for _ in $(seq 1 120); do
    if curl -sf "http://$listen:$port/-/ready" >/dev/null 2>&1; then
      echo "prometheus up on $listen:$port scraping $targets every $interval, as ${user:-$(id -un)}"; return
    fi
    running "$(cat "$dir/prometheus.pid")" || break
    sleep 0.25
  done
  tail -20 "$dir/prometheus.log" >&2
  die "prometheus did not become ready"
}

stop() {
  local p; p=$(pid)
  [ -n "$p" ] || { echo "prometheus not running"; return; }
  kill "$p"
  for _ in $(seq 1 100); do running "$p" || { echo "prometheus stopped"; return; }; sleep 0.1; done
  kill -9 "$p"; echo "prometheus killed"
}

case "$cmd" in
  install) install ;;
  check) install
         promtool check config "$here/prometheus/prometheus.yml"
         promtool check rules "$here/prometheus/rules.yml"
         promtool test rules "$here/prometheus/rules_test.yml" ;;
  start) start ;;
  stop) stop ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
