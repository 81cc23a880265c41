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
#   deploy/mariadb.sh remove     stop, then delete DIR and the database's own directory (wherever it is)
#
# environment:
#   SHARDSTOCK_MARIADB_PORT  port      (default 3406)
#   SHARDSTOCK_MARIADB_DIR   data dir  (default ./run/mariadb)
#   SHARDSTOCK_MARIADB_HOST  the address it listens on, its certificate
#                            names and dsn prints (default 127.0.0.1)
#   SHARDSTOCK_MARIADB_CLIENTS  where its users may log in from: addresses or
#                            MariaDB host patterns such as 10.77.0.%, comma-
#                            separated (default the host's own address: only
#                            from this host); a user of an address no longer
#                            listed is dropped at start
#   SHARDSTOCK_MARIADB_TEST_USER  1 (default): make the tests' user
#                            shardstock_test; 0: none (and drop it)
#
# Least privilege: run as root, it starts mariadbd as the system user
# shardstock-db (created once), never as root; otherwise as you. Reads and
# writes of files (INTO OUTFILE, LOAD DATA) are confined to DIR/db/files.
# The users have random passwords, written once to DIR/*.password (mode
# 0600): shardstock may do anything to the shardstock database and nothing
# else (no FILE, no other database); shardstock_test may create and use
# databases named t_* and e2e_* only (the tests make one each). Root logs
# in through the socket only. TLS: a CA and a server certificate for
# its host address are made under DIR/tls (openssl); clients verify the
# server with DIR/tls/ca.crt (shardstock: ?tls=true in the DSN and
# SHARDSTOCK_DB_CA_FILE). The application's user must use TLS (REQUIRE
# SSL): it logs in with neither its password nor anything else in plaintext.
#
# Where the files are. DIR is yours (root's, run as root): the passwords,
# tls/ and install.log. The database's own files (data/, files/, its
# socket, pid file, error log and a copy of its certificate in tls/) are in
# DIR/db, mode 0700, owned by the user mariadbd runs as. As root, this script
# changes the mode of no directory it did not make: the directories it makes
# itself (DIR and its missing parents) are 0711, so shardstock-db may pass
# through them but list nothing. When shardstock-db cannot reach DIR (a
# parent such as /root is 0700), DIR/db is a symbolic link to a directory
# made for the database outside your tree,
# /var/lib/shardstock/mariadb-PORT-XXXXXX; start says where the data is.
# `remove` deletes both. A DIR of the layout before DIR/db (DIR/data, DIR
# owned by shardstock-db) is moved into DIR/db on start, and DIR and tls/
# are root's again.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
# Everything written here (data, logs, pid files) is its owner's alone: the
# order table, the AOF and the logs name buyers and orders.
umask 077

port=${SHARDSTOCK_MARIADB_PORT:-3406}
host=${SHARDSTOCK_MARIADB_HOST:-127.0.0.1}
clients=${SHARDSTOCK_MARIADB_CLIENTS:-$host}
testuser=${SHARDSTOCK_MARIADB_TEST_USER:-1}
[[ $testuser =~ ^[01]$ ]] || { echo "mariadb.sh: SHARDSTOCK_MARIADB_TEST_USER must be 0 or 1, not '$testuser'" >&2; exit 1; }
[[ $host =~ ^[0-9.]+$ ]] && [ "$host" != 0.0.0.0 ] || { echo "mariadb.sh: SHARDSTOCK_MARIADB_HOST must be one IPv4 address of this host, not '$host'" >&2; exit 1; }
[[ $clients =~ ^[0-9.%_]+(,[0-9.%_]+)*$ ]] || { echo "mariadb.sh: SHARDSTOCK_MARIADB_CLIENTS must be IPv4 addresses or patterns (digits, dots, % and _), comma-separated, not '$clients'" >&2; exit 1; }
dir=${SHARDSTOCK_MARIADB_DIR:-./run/mariadb}
if [ "$(id -u)" = 0 ]; then
  (umask 066 && mkdir -p "$dir") # 0711: see "Where the files are"
else
  mkdir -p "$dir"
fi
dir=$(cd "$dir" && pwd)
db=$dir/db   # the database's own directory; its real path once start has made it
user=""      # the OS user mariadbd runs as ("" for you); set by start

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "mariadb.sh: $*" >&2; exit 1; }

install() {
  command -v mariadbd >/dev/null && command -v mariadb >/dev/null && return
  echo "mariadb.sh: installing mariadb-server from Debian"
  apt_install mariadb -- mariadb-server mariadb-client
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
# pid: mariadbd's pid, from DIR/db or, for a server started before DIR/db,
# from DIR.
pid() {
  local f
  for f in "$db/mariadb.pid" "$dir/mariadb.pid"; do [ -f "$f" ] && { cat "$f"; return; }; done
  true
}
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
dbuser() { service_user shardstock-db; }

# certificates: a CA made once under DIR/tls, and a server certificate
# for the host's address, made again when the address changed.
certificates() {
  local t="$dir/tls"
  [ -s "$t/server.crt" ] && [ "$(cat "$t/server.host" 2>/dev/null || echo 127.0.0.1)" = "$host" ] && return
  command -v openssl >/dev/null || apt_install -- openssl
  mkdir -p "$t"
  (
    cd "$t" && umask 077
    [ -s ca.crt ] && [ -s ca.key ] ||
      openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj "/CN=shardstock mariadb CA" -days 3650 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=$host" 2>/dev/null
    printf 'subjectAltName=IP:%s\n' "$host" >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 -extfile server.ext 2>/dev/null
    echo "$host" >server.host
  ) || die "could not make the TLS certificates"
}

# as_db CMD...: run CMD as the database's user, under umask 077. What is
# written into the database's directory is written as its owner, so a link
# planted there leads nowhere its owner could not write anyway.
as_db() {
  if [ -n "$user" ]; then
    runuser -u "$user" -- sh -c 'umask 077 && exec "$@"' sh "$@"
  else
    (umask 077 && "$@")
  fi
}

# database_dir: make DIR/db if missing (see "Where the files are"), check
# that the database's user reaches it, and set db to its real path.
database_dir() {
  if [ ! -e "$db" ] && [ ! -L "$db" ]; then
    if [ -z "$user" ] || runuser -u "$user" -- test -x "$dir"; then
      mkdir "$db"
    else
      [ -d /var/lib/shardstock ] || mkdir -m 711 /var/lib/shardstock
      ln -s "$(mktemp -d "/var/lib/shardstock/mariadb-$port-XXXXXX")" "$db"
    fi
    [ -z "$user" ] || chown "$user": "$(readlink -f "$db")"
  fi
  [ -d "$db" ] || die "$db links to $(readlink "$db"), which is gone: delete $db to start an empty database"
  db=$(readlink -f "$db")
  if [ -n "$user" ] && ! runuser -u "$user" -- test -w "$db" -a -x "$db"; then
    die "$user cannot reach $db (a directory on the way is closed to others): move it to a directory of its own, such as /var/lib/shardstock/mariadb-$port, and link $dir/db to it"
  fi
}

# earlier_layout: DIR was the database's own directory before DIR/db
# (DIR/data, DIR/files; DIR and DIR/tls owned by the database's user). Give
# DIR and tls/ back to root and move the database into DIR/db.
earlier_layout() {
  [ -d "$dir/data" ] && [ ! -e "$dir/db" ] && [ ! -L "$dir/db" ] || return 0
  if [ -n "$user" ] && [ "$(stat -c %U "$dir")" = "$user" ]; then
    chown root: "$dir" && chmod 711 "$dir"
    [ ! -d "$dir/tls" ] || chown -R root: "$dir/tls"
  fi
  database_dir
  local f
  for f in data files error.log; do [ ! -e "$dir/$f" ] || mv "$dir/$f" "$db/"; done
  rm -f "$dir/mariadb.pid" "$dir/mysqld.sock"
  [ -z "$user" ] || chown -R "$user": "$db"
  echo "mariadb.sh: moved the database from $dir/data to $db/data"
}

# grants is the SQL that makes the users, each only from the clients
# listed: the application's (TLS only) and, unless SHARDSTOCK_MARIADB_TEST_USER=0,
# the tests'; users of addresses no longer listed (or the tests' user,
# when not wanted) are dropped first.
grants() {
  local app=$1 test=$2 c keep="" sql=""
  IFS=, read -r -a list <<<"$clients"
  for c in "${list[@]}"; do keep="$keep${keep:+,}'$c'"; done
  # (the users of other hosts, and the tests' user when not wanted: dropped)
  sql="SET @drop = (SELECT GROUP_CONCAT(CONCAT(QUOTE(User), '@', QUOTE(Host))) FROM mysql.user
         WHERE (User = 'shardstock' AND Host NOT IN ($keep)) OR (User = 'shardstock_test' AND ($testuser = 0 OR Host NOT IN ($keep))));
       SET @s = IF(@drop IS NULL, 'DO 0', CONCAT('DROP USER ', @drop)); PREPARE d FROM @s; EXECUTE d; DEALLOCATE PREPARE d;
       DROP USER IF EXISTS '${user:-nobody-here}'@'localhost';
       CREATE DATABASE IF NOT EXISTS shardstock;"
  for c in "${list[@]}"; do
    sql="$sql
       CREATE USER IF NOT EXISTS 'shardstock'@'$c' IDENTIFIED BY '$app';
       ALTER USER 'shardstock'@'$c' IDENTIFIED BY '$app';
       REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'shardstock'@'$c';
       GRANT ALL ON shardstock.* TO 'shardstock'@'$c';
       ALTER USER 'shardstock'@'$c' REQUIRE SSL;"
    [ "$testuser" = 1 ] || continue
    sql="$sql
       CREATE USER IF NOT EXISTS 'shardstock_test'@'$c' IDENTIFIED BY '$test';
       ALTER USER 'shardstock_test'@'$c' IDENTIFIED BY '$test';
       REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'shardstock_test'@'$c';
       GRANT ALL ON \`t\\_%\`.* TO 'shardstock_test'@'$c';
       GRANT ALL ON \`e2e\\_%\`.* TO 'shardstock_test'@'$c';"
  done
  echo "$sql"
}

start() {
  install
  if alive; then echo "mariadb already running on :$port (pid $(pid))"; return; fi
  user=$(dbuser)
  earlier_layout
  database_dir
  local sock=$db/mysqld.sock f
  certificates
  as_db mkdir -p "$db/data" "$db/files" "$db/tls"
  for f in ca.crt server.crt server.key; do # mariadbd reads them as its user
    as_db sh -c 'cat >"$1"' sh "$db/tls/$f" <"$dir/tls/$f"
  done
  if [ ! -d "$db/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$db/data" ${user:+--user="$user"} --skip-test-db \
      --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 \
      || { tail -20 "$dir/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  nohup mariadbd --no-defaults ${user:+--user="$user"} --datadir="$db/data" --port="$port" --bind-address="$host" \
    --socket="$sock" --pid-file="$db/mariadb.pid" --log-error="$db/error.log" --secure-file-priv="$db/files" \
    --ssl-ca="$db/tls/ca.crt" --ssl-cert="$db/tls/server.crt" --ssl-key="$db/tls/server.key" \
    --skip-log-bin --innodb-buffer-pool-size=128M --max-connections=500 >/dev/null 2>&1 &
  local launched=$! app test where=""; app=$(password shardstock); test=$(password shardstock_test)
  [ ! -L "$dir/db" ] || where=": ${user:-you} cannot reach $dir, so $dir/db links there"
  for _ in $(seq 1 120); do
    if mariadb-admin --no-defaults --socket="$sock" -u"$(admin_login)" ping >/dev/null 2>&1; then
      grants "$app" "$test" | mariadb --no-defaults --socket="$sock" -u"$(admin_login)" # (stdin: ps shows argv, and the SQL holds the passwords)
      echo "mariadb up on $host:$port (pid $(pid), as ${user:-$(id -un)}, data $db/data$where)"; return
    fi
    running "$launched" || { tail -20 "$db/error.log" >&2; die "mariadbd exited during start"; }
    sleep 0.25
  done
  tail -20 "$db/error.log" >&2
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

# remove: stop, then delete DIR and the database's own directory.
remove() {
  stop TERM
  local t=""
  if [ -L "$dir/db" ]; then
    t=$(readlink "$dir/db")
    case "$t" in
      /var/lib/shardstock/mariadb-*) rm -rf -- "$t" ;;
      *) die "$dir/db links to $t, which this script did not make: delete it yourself" ;;
    esac
  fi
  rm -rf -- "$dir"
  echo "deleted $dir${t:+ and $t}"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop TERM ;;
  kill) stop KILL ;;
  remove) remove ;;
  status) if alive; then echo "mariadb up on :$port pid $(pid)"; else echo "mariadb down"; fi ;;
  dsn) echo "mysql://shardstock:$(password shardstock)@tcp($host:$port)/shardstock?tls=true" ;;
  ca) echo "$dir/tls/ca.crt" ;;
  test-dsn) echo "mysql://shardstock_test:$(password shardstock_test)@tcp($host:$port)/" ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $1 (see --help)" ;;
esac
