#!/usr/bin/env bash
# make profile-redis: where a purchase's Redis CPU goes, by function.
#
# Debian's redis-server has no symbols for its Lua or most of its own code,
# so perf cannot say what a script execution spends its time on. This builds
# the same upstream version as the installed redis-server, with symbols, from
# Debian's own source archive (the tarball's SHA-256 checked against the
# Sources index, whose own hash is checked against the signed InRelease),
# once, into run/tools. Then it runs the purchase load of make bench's (c):
# three fresh masters with AOF (appendfsync always unless
# SHARDSTOCK_REDIS_FSYNC says otherwise), a coordinator on SQLite with the
# orders written as they come, wrk with a new buyer per request. It records
# the first master with perf (DWARF call graphs) and prints:
#   - CPU per purchase of the coordinator and the masters (/proc),
#   - the first master's samples by what they were doing (AOF, the Lua
#     interpreter, redis.call, the commands themselves, the outbox reads),
#   - the bytes the first master appended to its AOF, by command.
# Environment: PROFILE_SECONDS (8, the wrk run; perf records 5 s of it),
# SHARDSTOCK_ORDER_RATE (1000000; 1 holds the order writer back).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
run=$root/run/redis-profile
tools=$root/run/tools
secs=${PROFILE_SECONDS:-8}
ports=17879,17979,18079
token=profile-admin-token-0123456789
cd "$root"

command -v wrk >/dev/null || { echo "profile: installing wrk from Debian"; apt_install -- wrk; }
command -v perf >/dev/null || { echo "profile: installing perf from Debian"; apt_install -- linux-perf; }
deploy/redis.sh install
ver=$(redis-server --version | sed -n 's/.* v=\([0-9.]*\) .*/\1/p')
build=$tools/redis-$ver-symbols
if [ ! -x "$build/src/redis-server" ]; then
  echo "profile: building redis $ver with symbols into $build (once, about 3 minutes)"
  dl=$(mktemp -d)
  mirror=http://deb.debian.org/debian
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  curl -fsS -o "$dl/InRelease" "$mirror/dists/$suite/InRelease"
  gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$dl/Release" "$dl/InRelease" 2>/dev/null \
    || { echo "profile: $suite's InRelease does not verify" >&2; exit 1; }
  curl -fsS -o "$dl/Sources.xz" "$mirror/dists/$suite/main/source/Sources.xz"
  want=$(awk '/^SHA256:/ {s = 1; next} /^[A-Za-z]/ {s = 0} s && $3 == "main/source/Sources.xz" {print $1}' "$dl/Release")
  [ "$(sha256sum <"$dl/Sources.xz" | cut -d' ' -f1)" = "$want" ] || { echo "profile: Sources.xz does not match InRelease" >&2; exit 1; }
  tarball=redis_$ver.orig.tar.gz
  xz -d "$dl/Sources.xz"
  sum=$(awk -v f="$tarball" '/^Package: redis$/ {p = 1} /^$/ {p = 0} p && /^Checksums-Sha256:/ {s = 1; next} p && /^[A-Za-z]/ {s = 0} p && s && $3 == f {print $1}' "$dl/Sources")
  [ -n "$sum" ] || { echo "profile: $tarball is not in $suite's Sources" >&2; exit 1; }
  curl -fsS -o "$dl/$tarball" "$mirror/pool/main/r/redis/$tarball"
  [ "$(sha256sum <"$dl/$tarball" | cut -d' ' -f1)" = "$sum" ] || { echo "profile: $tarball does not match Sources" >&2; exit 1; }
  mkdir -p "$tools"; rm -rf "$build" "$build.tmp"; mkdir "$build.tmp"
  tar xzf "$dl/$tarball" -C "$build.tmp" --strip-components 1
  make -C "$build.tmp" -j"$(nproc)" >"$tools/redis-$ver-symbols.log" 2>&1 \
    || { echo "profile: the build failed, see $tools/redis-$ver-symbols.log" >&2; exit 1; }
  mv "$build.tmp" "$build"
  rm -rf "$dl"
fi
bindir=$build/src
if [ "$(id -u)" = 0 ]; then
  # As root, deploy/redis.sh starts the masters as their own user, which
  # may not pass through this checkout's directories (run/ is 0700): the
  # binary goes where every user can run it.
  bindir=/usr/local/lib/shardstock/redis-$ver-symbols
  if ! cmp -s "$build/src/redis-server" "$bindir/redis-server"; then
    install -d -m 0755 "$bindir" && install -m 0755 "$build/src/redis-server" "$bindir/redis-server"
  fi
fi
export PATH=$bindir:$PATH # deploy/redis.sh starts this redis-server

rm -rf "$run"; mkdir -p "$run"
export SHARDSTOCK_REDIS_DIR=$run/redis
go build -o bin/shardstock ./cmd/shardstock
server=
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  deploy/redis.sh kill --ports "$ports" --dir "$run/redis" >/dev/null 2>&1 || true
}
trap cleanup EXIT
deploy/redis.sh start --ports "$ports" --dir "$run/redis" >/dev/null
first=$(cat "$run/redis/${ports%%,*}/redis.pid")
# A PATH entry its user cannot reach is skipped without a word: make sure
# the masters are the build with symbols, not Debian's binary.
[ "$(readlink "/proc/$first/exe")" = "$bindir/redis-server" ] || {
  echo "profile: the master runs $(readlink "/proc/$first/exe"), not $bindir/redis-server" >&2; exit 1; }
rpids=$(for p in ${ports//,/ }; do cat "$run/redis/$p/redis.pid"; done)
SHARDSTOCK_SHARDS=$(deploy/redis.sh urls --ports "$ports") SHARDSTOCK_HTTP_ADDR=127.0.0.1:18092 \
  SHARDSTOCK_ADMIN_TOKEN=$token SHARDSTOCK_DEV=1 SHARDSTOCK_DB=sqlite:$run/orders.db SHARDSTOCK_SPOOL_DIR=off \
  SHARDSTOCK_RATE_LIMITS=off SHARDSTOCK_LOG_LEVEL=warn SHARDSTOCK_START=home \
  SHARDSTOCK_ORDER_RATE=${SHARDSTOCK_ORDER_RATE:-1000000} bin/shardstock serve >>"$run/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do curl -sf 127.0.0.1:18092/readyz >/dev/null && break; sleep 0.1; done
curl -sf -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"stock":100000000,"per_user_limit":1}' 127.0.0.1:18092/admin/v1/products/plenty >/dev/null

tck=$(getconf CLK_TCK)
ticks() { local t=0 p; for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
s0=$(ticks "$server"); r0=$(ticks $rpids)
( sleep 2; perf record -q -F 1999 --call-graph dwarf,16384 -p "$first" -o "$run/perf.data" -- sleep 5 >/dev/null 2>&1 ) &
rec=$!
n=$(wrk -t2 -c128 -d"${secs}s" -s deploy/bench/purchase.lua http://127.0.0.1:18092/api/v1/products/plenty/purchase \
  -- "prof$(date +%s%N)-" | awk '/requests in/ {print $1}')
s1=$(ticks "$server"); r1=$(ticks $rpids)
wait "$rec" || true
kill "$server"; wait "$server" 2>/dev/null || true; server= # nothing more is appended to the AOF
awk -v n="$n" -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v tck="$tck" 'BEGIN { us = 1e6 / tck / n
  printf "%d purchases in the wrk run: coordinator %.1f us, the three masters %.1f us of CPU per purchase\n\n", n, s * us, r * us }'

echo "the first master's samples (perf, 5 s), by what they were doing:"
perf script -i "$run/perf.data" 2>/dev/null | python3 "$root/deploy/bench/redis-profile.py" stacks
echo
echo "what the first master appended to its AOF, by command:"
python3 "$root/deploy/bench/redis-profile.py" aof "$run/redis/${ports%%,*}"/appendonlydir/*.incr.aof*
