#!/usr/bin/env bash
# Run MariaDB for shardstock's orders: Debian's mariadb-server on its own port
# and data dir (not the system service).
#
#   deploy/mariadb.sh install    install mariadb-server from Debian if missing (its system service is not started)
#   deploy/mariadb.sh start      initialise the data dir once, start, create the database and the users
#   deploy/mariadb.sh stop       shut down (SIGTERM, then SIGKILL)
#   deploy/mariadb.sh kill       SIGKILL (a crash)
#   deploy/mariadb.sh status     print what runs
#   deploy/mariadb.sh dsn        print the SHARDSTOCK_DB value (the application's user, over TLS)
#   deploy/mariadb.sh ca         print the SHARDSTOCK_DB_CA_FILE value (the CA of its certificate)
#   deploy/mariadb.sh test-dsn   print the test user's DSN, without a database (make test)
#
# environment:
#   SHARDSTOCK_MARIADB_PORT  port      (default 3406)
#   SHARDSTOCK_MARIADB_DIR   data dir  (default ./run/mariadb)
#
# Least privilege: run as root, it starts mariadbd as the system user
# shardstock-db (created once), never as root; otherwise as you. Reads and
# writes of files (INTO OUTFILE, LOAD DATA) are confined to DIR/files. The
# users have random passwords, written once to DIR/*.password (mode 0600):
# shardstock may do anything to the shardstock database and nothing else
# (no FILE, no other database); shardstock_test may create and use
# databases named t_* and e2e_* only (the tests make one each). Root logs
# in through the socket only. TLS: a CA and a server certificate for
# 127.0.0.1 are made once under DIR/tls (openssl); clients verify the
# server with DIR/tls/ca.crt (shardstock: ?tls=true in the DSN and
# SHARDSTOCK_DB_CA_FILE). The application's user must use TLS (REQUIRE
# SSL): it logs in with neither its password nor anything else in plaintext.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077

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

# password NAME: the password in DIR/NAME.password, made up the first time.
password() {
  local f="$dir/$1.password"
  if [ ! -s "$f" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f")
  fi
  cat "$f"
}

# dbuser: the OS user mariadbd runs as ("" for the current, non-root user).
dbuser() {
  [ "$(id -u)" = 0 ] || return 0
  if ! id shardstock-db >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin shardstock-db
  fi
  echo shardstock-db
}

# certificates: a CA and a server certificate for 127.0.0.1, made once.
certificates() {
  local t="$dir/tls"
  [ -s "$t/server.crt" ] && return
  command -v openssl >/dev/null || apt_install -- openssl
  mkdir -p "$t"
  (
    cd "$t" && umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj "/CN=shardstock mariadb CA" -days 3650 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=127.0.0.1" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 -extfile server.ext 2>/dev/null
  ) || die "could not make the TLS certificates"
}

start() {
  install
  if alive; then echo "mariadb already running on :$port (pid $(pid))"; return; fi
  local user; user=$(dbuser)
  mkdir -p "$dir/files" "$dir/data"
  certificates
  if [ -n "$user" ]; then
    # The database's OS user owns its files and reaches them through the
    # parents (before mariadb-install-db, which runs as that user too).
    chown -R "$user" "$dir/data" "$dir/files" "$dir/tls"
    chown "$user" "$dir"
    chmod 700 "$dir/files"
    local p="$dir"; while [ "$p" != / ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
  fi
  if [ ! -d "$dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$dir/data" ${user:+--user="$user"} --skip-test-db \
      --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 \
      || { tail -20 "$dir/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  nohup mariadbd --no-defaults ${user:+--user="$user"} --datadir="$dir/data" --port="$port" --bind-address=127.0.0.1 \
    --socket="$sock" --pid-file="$dir/mariadb.pid" --log-error="$dir/error.log" --secure-file-priv="$dir/files" \
    --ssl-ca="$dir/tls/ca.crt" --ssl-cert="$dir/tls/server.crt" --ssl-key="$dir/tls/server.key" \
    --skip-log-bin --innodb-buffer-pool-size=128M --max-connections=500 >/dev/null 2>&1 &
  local launched=$! app test; app=$(password shardstock); test=$(password shardstock_test)
  for _ in $(seq 1 120); do
    if mariadb-admin --no-defaults --socket="$sock" -u"$(admin_login)" ping >/dev/null 2>&1; then
      mariadb --no-defaults --socket="$sock" -u"$(admin_login)" -e "
        DROP USER IF EXISTS '${user:-nobody-here}'@'localhost';
        CREATE DATABASE IF NOT EXISTS shardstock;
        CREATE USER IF NOT EXISTS 'shardstock'@'127.0.0.1' IDENTIFIED BY '$app';
        ALTER USER 'shardstock'@'127.0.0.1' IDENTIFIED BY '$app';
        REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'shardstock'@'127.0.0.1';
        GRANT ALL ON shardstock.* TO 'shardstock'@'127.0.0.1';
        ALTER USER 'shardstock'@'127.0.0.1' REQUIRE SSL;
        CREATE USER IF NOT EXISTS 'shardstock_test'@'127.0.0.1' IDENTIFIED BY '$test';
        ALTER USER 'shardstock_test'@'127.0.0.1' IDENTIFIED BY '$test';
        REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'shardstock_test'@'127.0.0.1';
        GRANT ALL ON \`t\\_%\`.* TO 'shardstock_test'@'127.0.0.1';
        GRANT ALL ON \`e2e\\_%\`.* TO 'shardstock_test'@'127.0.0.1';"
      echo "mariadb up on 127.0.0.1:$port (pid $(pid), data $dir/data, as ${user:-$(id -un)})"; return
    fi
    running "$launched" || { tail -20 "$dir/error.log" >&2; die "mariadbd exited during start"; }
    sleep 0.25
  done
  tail -20 "$dir/error.log" >&2
  die "mariadb did not answer within 30 s"
}

# admin_login: who logs in through the socket to set up (root when root).
admin_login() { if [ "$(id -u)" = 0 ]; then echo root; else id -un; fi; }

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
  dsn) echo "mysql://shardstock:$(password shardstock)@tcp(127.0.0.1:$port)/shardstock?tls=true" ;;
  ca) echo "$dir/tls/ca.crt" ;;
  test-dsn) echo "mysql://shardstock_test:$(password shardstock_test)@tcp(127.0.0.1:$port)/" ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $1 (see --help)" ;;
esac
