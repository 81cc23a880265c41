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

start() {
  install
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
  mkdir -p "$dir/data"
  if [ -n "$user" ]; then
    group=$(id -gn "$user")
    drop=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --no-new-privs)
    chown root:"$group" "$dir" "$dir/prometheus.yml" "$dir/rules.yml"
    chmod 0710 "$dir"; chmod 0640 "$dir/prometheus.yml" "$dir/rules.yml"
    chown -R "$user:$group" "$dir/data"; chmod -R go-rwx "$dir/data" # (chown -R follows no symbolic link)
  fi
  # From DIR, by relative paths: a directory on the way to DIR may be
  # closed to the user.
  (cd "$dir" || exit
    "${drop[@]}" nohup prometheus --config.file=prometheus.yml --storage.tsdb.path=data \
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
  local p; p=$(cat "$dir/prometheus.pid" 2>/dev/null || true)
  [ -n "$p" ] && running "$p" || { echo "prometheus not running"; return; }
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
