#!/usr/bin/env bash
# Run the nginx edge in front of one or more coordinators: Debian's nginx
# with libnginx-mod-http-lua, the Lua limiter of deploy/nginx/limiter.lua
# (global and per-product limits published by the coordinators at
# /edge/limits) and failover between coordinators.
#
#   deploy/nginx.sh install
#   deploy/nginx.sh start [--port 8000] [--listen 127.0.0.1] [--upstreams 127.0.0.1:8080,...] [--dir ./run/nginx]
#                         [--conns-per-ip 256] [--open-conns-per-ip 4 x conns-per-ip]
#                         [--rate-per-ip 100] [--rate-per-buyer 5]
#                         [--ops-allow CIDR,...] [--pages DIR]
#
# --listen is the address buyers reach the edge at (this host's address on
# their network; 0.0.0.0 for every interface).
# One client address may hold --open-conns-per-ip connections in any phase
# (idle, still sending its request line or headers, being answered; past
# it a new one is closed at once), of which --conns-per-ip with a request
# in progress (past it: 429 in the API's JSON). The default leaves room for
# the idle keep-alive connections of the browsers behind one address. A
# stream proxy on --port counts the first and hands each connection on,
# with the client's address in the PROXY protocol, to the http server on a
# unix socket in a directory only nginx's workers reach: as root,
# /run/shardstock-edge.XXXXXX, owned by the workers' user, the system user
# shardstock-edge (made once; no other process runs as it, and the workers
# are not dumpable: none reads their keys); otherwise DIR/edge.XXXXXX. stop
# removes it.
#
# The edge serves buyers only: the operators' paths (/admin, /metrics,
# /edge/limits, /openapi.yaml) answer 403 except from the --ops-allow
# networks (none by default), and a client's own X-User-ID is dropped.
# With --pages DIR (the coordinators' SHARDSTOCK_PAGES_DIR), the product
# pages and their scripts are served from DIR as files; the coordinators
# answer only what the pages poll.
# Purchases: one client address gets --rate-per-ip a second and one buyer
# --rate-per-buyer (429 past them, counted against nothing else), before
# the product and global budgets the coordinators publish; every rate is a
# sliding one-second window. With SHARDSTOCK_HMAC_SECRET in the environment
# (the coordinators' key of buyers' tokens) a purchase without a valid
# token is answered 401 here and counted against no budget; without it the
# edge cannot tell buyers apart, and says so in its log at start (run it
# with the key: only the per-address rate then stands before the budgets).
# With SHARDSTOCK_QUEUE_SECRET in the environment (the coordinators' key of
# the waiting rooms' places), a purchase of a queued product needs the
# buyer's own place, not revoked, whose turn has come and is not over, or
# it is answered 403 here.
#   deploy/nginx.sh stop  [--dir ./run/nginx]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
port=8000 listen=127.0.0.1 upstreams=127.0.0.1:8080 dir=./run/nginx conns=256 open="" ops="" pages="" perip=100 perbuyer=5
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "nginx.sh: $*" >&2; exit 1; }
cmd=${1:-}; [ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    --upstreams) upstreams=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --conns-per-ip) conns=$2; shift 2 ;;
    --open-conns-per-ip) open=$2; shift 2 ;;
    --ops-allow) ops=$2; shift 2 ;;
    --rate-per-ip) perip=$2; shift 2 ;;
    --rate-per-buyer) perbuyer=$2; shift 2 ;;
    --pages) pages=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
open=${open:-$((4 * conns))}
[[ $listen =~ ^[0-9.]+$ ]] || die "--listen must be an IPv4 address, not '$listen'"
[[ $perip =~ ^[1-9][0-9]*$ ]] || die "--rate-per-ip must be a whole number of requests a second, not '$perip'"
[[ $perbuyer =~ ^[1-9][0-9]*$ ]] || die "--rate-per-buyer must be a whole number of requests a second, not '$perbuyer'"
# (the address start checks the edge at: 0.0.0.0 answers on loopback too)
reach=$listen; [ "$reach" != 0.0.0.0 ] || reach=127.0.0.1
mkdir -p "$dir/tmp"; dir=$(cd "$dir" && pwd)

install() {
  local m=/usr/lib/nginx/modules
  command -v nginx >/dev/null && [ -f $m/ngx_http_lua_module.so ] && [ -f $m/ngx_stream_module.so ] && return
  echo "nginx.sh: installing nginx, libnginx-mod-http-lua and libnginx-mod-stream from Debian"
  apt_install nginx -- nginx-light libnginx-mod-http-lua libnginx-mod-stream
}

running() { kill -0 "$1" 2>/dev/null && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
nginx_pid() { cat "$dir/nginx.pid" 2>/dev/null || cat "$dir/nginx.launch.pid" 2>/dev/null || true; }

# sockets: make the directory of the http server's socket (see above),
# record it in DIR/sockdir and print it.
sockets() {
  local s
  if [ "$(id -u)" = 0 ]; then
    s=$(mktemp -d /run/shardstock-edge.XXXXXX)
    chown "$edge_user:$(id -gn "$edge_user")" "$s"
  else
    s=$(mktemp -d "$dir/edge.XXXXXX")
  fi
  echo "$s" >"$dir/sockdir"
  echo "$s"
}

# remove_sockets: delete the socket directory of the last start, whose
# nginx has stopped.
remove_sockets() {
  local s; s=$(cat "$dir/sockdir" 2>/dev/null || true)
  case "$s" in /run/shardstock-edge.*|"$dir"/edge.*) rm -rf -- "$s" ;; esac
  rm -f "$dir/sockdir"
}

# answers: the http server answers through the stream proxy (a request
# line it refuses with 400 itself: no coordinator is asked).
answers() {
  exec 3<>"/dev/tcp/$reach/$port" && printf 'x\r\n\r\n' >&3 || return 1
  local line=""; read -r -t 2 line <&3 || true
  [[ $line == HTTP/* ]]
}

start() {
  install
  edge_user=$(service_user shardstock-edge) # ("" unless root)
  local p; p=$(nginx_pid)
  if [ -n "$p" ] && running "$p"; then die "nginx already runs from $dir (pid $p): stop it first"; fi
  remove_sockets # a killed nginx's
  local sock user="" lua=$here/nginx sdir; sdir=$(sockets); sock=$sdir/http.sock
  if [ "$(id -u)" = 0 ]; then
    # The workers (shardstock-edge) load the limiter when they start:
    # from a checkout they may not reach (a parent closed to others, as a
    # test's temporary directory is) every purchase would be a 500. They
    # get a copy in their own directory.
    command install -o "$edge_user" -g "$(id -gn "$edge_user")" -m 0400 "$here"/nginx/*.lua "$sdir"/ # (install alone: the function above)
    lua=$sdir
  fi
  [ "$(id -u)" != 0 ] || user="user $edge_user $(id -gn "$edge_user");"
  local ups=""
  IFS=, read -r -a list <<<"$upstreams"
  for u in "${list[@]}"; do ups="$ups    server $u max_fails=1 fail_timeout=2s;"$'\n'; done
  # Every coordinator answered 404 to a ticket look-up: "404, 404, ..." once
  # per coordinator in $upstream_status.
  local all404="^404"; for ((k = 1; k < ${#list[@]}; k++)); do all404="$all404, 404"; done; all404="$all404\$"
  local pagecfg=""
  if [ -n "$pages" ]; then
    # The page files get their types from Debian's mime.types (with
    # nosniff a browser runs no script and applies no style served as
    # text/plain) and the headers the coordinator sends with them (a
    # location's add_header replaces the server's: all of them again).
    local csp="default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    local hdrs="include /etc/nginx/mime.types; add_header Content-Security-Policy \"$csp\" always; add_header Referrer-Policy same-origin always; add_header X-Content-Type-Options nosniff always; add_header X-Frame-Options DENY always;"
    pagecfg="    location ~ \"^/products/([A-Za-z0-9_-]{1,64})\$\" { root $pages; $hdrs default_type text/html; try_files /products/\$1.html =404; }"$'\n'
    pagecfg="$pagecfg    location /static/ { root $pages; $hdrs }"$'\n'
  fi
  local rules=""
  IFS=, read -r -a nets <<<"$ops"
  for n in "${nets[@]}"; do [ -n "$n" ] && rules="$rules      allow $n;"$'\n'; done
  sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" -e "s|@LISTEN@|$listen|g" -e "s|@LUA@|$lua|g" -e "s|@CONNS_PER_IP@|$conns|g" \
      -e "s|@OPEN_CONNS_PER_IP@|$open|g" -e "s|@SOCK@|$sock|g" -e "s|@RATE_PER_IP@|$perip|g" -e "s|@RATE_PER_BUYER@|$perbuyer|g" -e "s|@USER@|$user|g" \
      -e "s|@OPS_ALLOW@|${ops:-nowhere}|g" -e "s|@ALL_404@|$all404|g" "$here/nginx/nginx.conf.tmpl" \
    | awk -v ups="$ups" -v rules="$rules" -v pages="$pagecfg" '{ if ($0 == "@UPSTREAMS@") printf "%s", ups; else if ($0 == "@OPS_RULES@") printf "%s", rules; else if ($0 == "@PAGES@") printf "%s", pages; else print }' >"$dir/nginx.conf"
  if [ -z "${SHARDSTOCK_HMAC_SECRET:-}" ]; then
    echo "nginx.sh: warning: SHARDSTOCK_HMAC_SECRET is not set: the edge cannot verify buyers' tokens, and only the per-address rate ($perip/s) stands before the product budgets" >&2
  fi
  nginx -t -q -c "$dir/nginx.conf" -p "$dir" 2>"$dir/check.log" || { cat "$dir/check.log" >&2; remove_sockets; die "bad config"; }
  nohup nginx -c "$dir/nginx.conf" -p "$dir" >"$dir/nginx.out" 2>&1 &
  echo $! >"$dir/nginx.launch.pid"
  for _ in $(seq 1 80); do
    if (answers) 2>/dev/null; then
      echo "nginx edge up on $listen:$port in front of $upstreams ($open connections per address, $conns requests in progress)"; return
    fi
    sleep 0.1
  done
  cat "$dir/error.log" >&2 || true
  die "nginx did not start"
}

stop() {
  local p; p=$(nginx_pid)
  [ -n "$p" ] && running "$p" || { remove_sockets; echo "nginx not running"; return; }
  kill -QUIT "$p"
  for _ in $(seq 1 50); do running "$p" || { stopped; echo "nginx stopped"; return; }; sleep 0.1; done
  kill -9 "$p"; stopped; echo "nginx killed"
}
stopped() { rm -f "$dir/nginx.launch.pid"; remove_sockets; }

case "$cmd" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  ""|-h|--help|help) usage ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
