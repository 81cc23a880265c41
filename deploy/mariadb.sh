#!/usr/bin/env bash
# Run MariaDB for shardstock's orders: Debian's mariadb-server on its own port
# and data dir (not the system service).
#
#   deploy/mariadb.sh install   install mariadb-server from Debian if missing
#   deploy/mariadb.sh start     initialise the data dir once, start, create the database and user
#   deploy/mariadb.sh stop      shut down (SIGTERM, then SIGKILL)
#   deploy/mariadb.sh kill      SIGKILL (a crash)
#   deploy/mariadb.sh status    print what runs
#   deploy/mariadb.sh dsn       print the SHARDSTOCK_DB value
#
# environment:
#   SHARDSTOCK_MARIADB_PORT  port      (default 3406)
#   SHARDSTOCK_MARIADB_DIR   data dir  (default ./run/mariadb)
# The user shardstock/shardstock may create databases (tests make one each);
# for anything but a local run, create a user limited to its database.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

port=${SHARDSTOCK_MARIADB_PORT:-3406}
dir=${SHARDSTOCK_MARIADB_DIR:-./run/mariadb}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock=$dir/mysqld.sock

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "mariadb.sh: $*" >&2; exit 1; }

install() {
  command -v mariadbd >/dev/null && command -v mariadb >/dev/null && return
  echo "mariadb.sh: installing mariadb-server from Debian"
  apt_install mariadb -- mariadb-server mariadb-client
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
pid() { [ -f "$dir/mariadb.pid" ] && cat "$dir/mariadb.pid" || true; }
alive() { local p; p=$(pid); [ -n "$p" ] && running "$p"; }

start() {
  install
  if alive; then echo "mariadb already running on :$port (pid $(pid))"; return; fi
  if [ ! -d "$dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$dir/data" --user=root --skip-test-db \
      --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 \
      || { tail -20 "$dir/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  nohup mariadbd --no-defaults --user=root --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
    --socket="$sock" --pid-file="$dir/mariadb.pid" --log-error="$dir/error.log" \
    --skip-log-bin --innodb-buffer-pool-size=128M --max-connections=500 >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    if mariadb-admin --no-defaults --socket="$sock" -uroot ping >/dev/null 2>&1; then
      mariadb --no-defaults --socket="$sock" -uroot -e "
        CREATE DATABASE IF NOT EXISTS shardstock;
        CREATE USER IF NOT EXISTS 'shardstock'@'127.0.0.1' IDENTIFIED BY 'shardstock';
        GRANT ALL ON *.* TO 'shardstock'@'127.0.0.1';"
      echo "mariadb up on 127.0.0.1:$port (pid $(pid), data $dir/data)"; return
    fi
    sleep 0.25
  done
  tail -20 "$dir/error.log" >&2
  die "mariadb did not answer within 30 s"
}

stop() { # signal
  alive || { echo "mariadb not running"; return; }
  local p; p=$(pid)
  kill "-$1" "$p"
  for _ in $(seq 1 200); do running "$p" || { echo "mariadb stopped (SIG$1)"; return; }; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  echo "mariadb killed after 20 s"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop TERM ;;
  kill) stop KILL ;;
  status) if alive; then echo "mariadb up on :$port pid $(pid)"; else echo "mariadb down"; fi ;;
  dsn) echo "mysql://shardstock:shardstock@tcp(127.0.0.1:$port)/shardstock" ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $1 (see --help)" ;;
esac
