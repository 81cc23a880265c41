#!/usr/bin/env bash
# Build and run shardstock as an OCI image, without pulling anything: a
# static bin/shardstock (CGO_ENABLED=0; the Lua scripts, migrations, web
# pages and OpenAPI document are embedded by go:embed) on `scratch`, with
# the host's CA bundle (Debian's ca-certificates) for rediss:// shards and
# MySQL over TLS, a passwd/group naming the user, /tmp, and /data owned by
# that user. No shell, no package manager: the image is the binary.
#
#   deploy/image.sh install               install buildah, podman and runc from Debian if missing
#   deploy/image.sh build [--tag T]       build the image; prints its ID on stdout
#   deploy/image.sh run   [--tag T] [--name N] [--volume V] [--port P]
#                                         start a coordinator from the image, detached, on the
#                                         host's network, with every SHARDSTOCK_* variable of
#                                         this environment (the secrets as podman secrets, below);
#                                         it listens on 127.0.0.1:P (8080) unless SHARDSTOCK_HTTP_ADDR
#                                         says otherwise; prints the container's ID
#   deploy/image.sh stop  [--name N]      stop it (SIGTERM: in-flight requests finish) and remove it;
#                                         fails when it exited non-zero. Its volume stays
#
# options (or the environment variable in brackets):
#   --tag shardstock:dev   [SHARDSTOCK_IMAGE_TAG]     the image's name
#   --name shardstock      [SHARDSTOCK_IMAGE_NAME]    the container's name
#   --volume NAME|/DIR     [SHARDSTOCK_IMAGE_VOLUME]  what is mounted at /data (the SQLite orders and
#                          the spool: they must outlive the container); default the podman
#                          volume N-data, which takes /data's owner from the image when made (a
#                          host directory must be writable by uid 65532)
#
# The image runs as uid/gid 65532 (no name on the host, so a file it
# writes to a host directory is nobody's there), never as root, and is
# configured only by the environment of API.md. It sets:
#   SHARDSTOCK_HTTP_ADDR=0.0.0.0:8080     (the binary's default is loopback, which nobody
#                                         outside the container could reach)
#   SHARDSTOCK_DB=sqlite:/data/orders.db  SHARDSTOCK_SPOOL_DIR=/data/spool
# and everything else (SHARDSTOCK_SHARDS, the admin token, the secrets) is
# the deployment's to set. run starts the container with a read-only root
# file system, no capabilities and no-new-privileges. On the host's network
# 0.0.0.0 would be every interface of the host: run sets
# SHARDSTOCK_HTTP_ADDR=127.0.0.1:P (--port, 8080) unless the caller sets it. The
# secrets (the admin token, the HMAC, payment and queue keys, the broker's
# credentials, and SHARDSTOCK_SHARDS and SHARDSTOCK_DB, whose URLs carry
# passwords) go in as podman secrets mounted as files under /tmp/secrets
# for the coordinator's --*-file flags: none is in `podman inspect` or the
# container's configuration. Each is named N-VARIABLE (lower case) and
# removed by stop.
#
# Storage is podman's and buildah's (/var/lib/containers as root); set
# STORAGE_DRIVER=vfs where overlay cannot be mounted. run works around two
# limits of sandboxed hosts: it passes the caller's own open-file limit
# (podman would raise it to 1048576, which needs CAP_SYS_RESOURCE; a
# sandbox may refuse that even to root), and, on a host with hybrid cgroups
# (v1 controllers plus a v2 tree), it uses runc, which crun 1.8 refuses.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

tag=${SHARDSTOCK_IMAGE_TAG:-shardstock:dev}
name=${SHARDSTOCK_IMAGE_NAME:-shardstock}
volume=${SHARDSTOCK_IMAGE_VOLUME:-}
port=8080
# The image's user: 65532 is the usual "nonroot" id of static images, far
# from the host's system and human users.
uid=65532

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "image.sh: $*" >&2; exit 1; }

cmd=${1:-}; [ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --volume) volume=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
volume=${volume:-$name-data}

install() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v podman >/dev/null || missing+=(podman)
  # (runc: see hybrid_cgroups)
  command -v runc >/dev/null || missing+=(runc)
  [ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "image.sh: installing ${missing[*]} from Debian"
  # (podman ships a socket and a restart service: neither is wanted running)
  apt_install podman.socket podman-restart -- "${missing[@]}"
}

need() {
  local t
  for t in "$@"; do command -v "$t" >/dev/null || die "$t is not installed: deploy/image.sh install"; done
}

build() {
  need buildah go
  [ -f /etc/ssl/certs/ca-certificates.crt ] || die "no /etc/ssl/certs/ca-certificates.crt: deploy/image.sh install"
  local id
  # (globals: the EXIT trap runs after build has returned)
  stage=$(mktemp -d)
  ctr=""
  trap 'rm -rf "$stage"; [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
  # Static: scratch has no libc to link against. -trimpath keeps the build
  # machine's paths out of the binary; -s -w drop the symbol and debug
  # tables (panics still print file:line).
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$stage/shardstock" ./cmd/shardstock)
  # The file system, as two tars (buildah add unpacks a local tar with
  # its entries' owners and modes; buildah copy would make the
  # directories 0755 root's): everything root's, and /data its user's.
  mkdir -p "$stage/root/usr/local/bin" "$stage/root/etc/ssl/certs" "$stage/data/data"
  mv "$stage/shardstock" "$stage/root/usr/local/bin/shardstock"
  cp /etc/ssl/certs/ca-certificates.crt "$stage/root/etc/ssl/certs/"
  # Names for the image's only user, so tools inside and out show one.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nshardstock:x:%s:%s:shardstock:/data:/sbin/nologin\n' "$uid" "$uid" >"$stage/root/etc/passwd"
  printf 'root:x:0:\nshardstock:x:%s:\n' "$uid" >"$stage/root/etc/group"
  mkdir -m 1777 "$stage/root/tmp"
  # (where run mounts the secrets: the root file system is read-only)
  mkdir -p -m 0755 "$stage/root/run/secrets"
  chmod 0755 "$stage/root/usr/local/bin/shardstock"
  chmod 0644 "$stage/root/etc/ssl/certs/ca-certificates.crt" "$stage/root/etc/passwd" "$stage/root/etc/group"
  chmod 0700 "$stage/data/data"
  # (the tops by name, not ".": a "./" entry would give / the 0700 of mktemp)
  tar -C "$stage/root" --numeric-owner --owner=0 --group=0 -cf "$stage/root.tar" etc usr tmp run
  tar -C "$stage/data" --numeric-owner --owner="$uid" --group="$uid" -cf "$stage/data.tar" data
  ctr=$(buildah from scratch)
  buildah add --quiet "$ctr" "$stage/root.tar" / >/dev/null
  buildah add --quiet "$ctr" "$stage/data.tar" / >/dev/null
  buildah config \
    --user "$uid:$uid" \
    --workingdir /data \
    --entrypoint '["/usr/local/bin/shardstock"]' \
    --cmd serve \
    --env SHARDSTOCK_HTTP_ADDR=0.0.0.0:8080 \
    --env SHARDSTOCK_DB=sqlite:/data/orders.db \
    --env SHARDSTOCK_SPOOL_DIR=/data/spool \
    --port 8080/tcp \
    --volume /data \
    --stop-signal SIGTERM \
    --label org.opencontainers.image.title=shardstock \
    --label org.opencontainers.image.description="sharded-inventory flash-sale coordinator" \
    "$ctr"
  id=$(buildah commit --quiet --rm "$ctr" "$tag")
  ctr=""
  echo "image.sh: built $tag" >&2
  echo "$id"
}

# hybrid_cgroups: cgroup v1 controllers with a v2 tree beside them, where
# crun (1.8, Debian 12's) refuses to start a container at all ("cgroups in
# hybrid mode not supported"); runc starts it.
hybrid_cgroups() {
  [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] &&
    [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]
}

run() {
  need podman
  local opts=() nofile
  if hybrid_cgroups && command -v runc >/dev/null; then opts+=(--runtime runc); fi
  # Limits the container may have without raising a hard limit: the
  # caller's open files (a coordinator holds a connection per buyer), and
  # 4096 processes for a Go server's few dozen threads (podman would ask
  # for as many as the host allows).
  nofile=$(ulimit -Hn)
  [ "$nofile" != unlimited ] || nofile=1048576
  opts+=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
  # The host's network: the coordinator reaches the shards where the
  # caller does, and listens where SHARDSTOCK_HTTP_ADDR says (loopback
  # unless the caller says otherwise).
  [[ $port =~ ^[0-9]+$ ]] || die "--port must be a port number, not '$port'"
  [ -n "${SHARDSTOCK_HTTP_ADDR:-}" ] || opts+=(--env "SHARDSTOCK_HTTP_ADDR=127.0.0.1:$port")
  local var flag sec args=()
  for var in $(compgen -e | grep '^SHARDSTOCK_' || true); do
    [ -n "${!var}" ] || continue # (empty: the setting's default; podman refuses an empty secret)
    sec=$(secret_name "$var")
    flag=${file_flags[$var]:-}
    if [ -n "$flag" ]; then
      put_secret "$sec" "${!var}"
      opts+=(--secret "$sec,type=mount,target=/tmp/secrets/$sec,uid=$uid,gid=$uid,mode=0400")
      args+=("--$flag-file" "/tmp/secrets/$sec")
    else
      opts+=(--env "$var")
    fi
  done
  podman run --detach --name "$name" --network host \
    --read-only --cap-drop ALL --security-opt no-new-privileges \
    --volume "$volume:/data" \
    "${opts[@]}" "$tag" serve "${args[@]}"
}

# secret_name VAR: the podman secret of setting VAR for container N.
secret_name() { echo "$name-$(echo "${1#SHARDSTOCK_}" | tr 'A-Z_' 'a-z-')"; }

# put_secret NAME VALUE: the podman secret NAME holds VALUE (podman 4.3
# has no secret create --replace).
put_secret() {
  podman secret rm "$1" >/dev/null 2>&1 || true
  printf '%s' "$2" | podman secret create "$1" - >/dev/null
}

# file_flags: the settings that are or may carry secrets (the shards' and
# the database's URLs hold passwords) and the coordinator's flag that reads
# each from a file.
declare -A file_flags=([SHARDSTOCK_ADMIN_TOKEN]=admin-token [SHARDSTOCK_HMAC_SECRET]=hmac-secret
  [SHARDSTOCK_PAYMENT_SECRET]=payment-secret [SHARDSTOCK_PAYMENT_SECRET_PREVIOUS]=payment-secret-previous
  [SHARDSTOCK_QUEUE_SECRET]=queue-secret [SHARDSTOCK_MQ_CREDENTIALS]=mq-credentials
  [SHARDSTOCK_SHARDS]=shards [SHARDSTOCK_DB]=db)

stop() {
  need podman
  local rc=0 var
  if podman container exists "$name"; then
    # The coordinator drains for up to 15 s on SIGTERM (Main.Close), then
    # closes the spool and the database: 30 s before SIGKILL.
    podman stop --time 30 "$name" >/dev/null
    rc=$(podman inspect --format '{{.State.ExitCode}}' "$name")
    podman rm "$name" >/dev/null
  fi
  # Its secrets, by name (another container's, N-2's say, stay), also
  # those of a run that failed or a container removed by hand.
  for var in "${!file_flags[@]}"; do podman secret rm "$(secret_name "$var")" >/dev/null 2>&1 || true; done
  # (a coordinator that failed its shutdown says so: its logs went with it)
  [ "$rc" = 0 ] || die "$name exited with status $rc"
}

case "$cmd" in
  install) install ;;
  build) build ;;
  run) run ;;
  stop) stop ;;
  -h|--help|help|"") usage ;;
  *) die "unknown command $cmd (see --help)" ;;
esac
