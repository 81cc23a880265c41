# Shared by the deploy scripts (sourced, not run).

# as_root runs a command as root: directly when we are root, else with sudo.
as_root() {
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "deploy: '$*' needs root, and sudo is not installed" >&2
    return 1
  fi
}

# apt_install [SERVICE...] -- PACKAGE...
# Installs Debian packages without starting or enabling their system
# services (a policy-rc.d that refuses every start while apt runs; with
# systemd, each SERVICE is disabled and stopped afterwards): the deploy
# scripts run their own instances on their own ports, and a stock instance
# on the usual port (6379, 3306, 80, 9090) would be a surprise.
apt_install() {
  local services=()
  while [ "$1" != "--" ]; do services+=("$1"); shift; done
  shift
  local policy=/usr/sbin/policy-rc.d made="" rc=0 mask
  mask=$(umask)
  umask 022 # (the scripts keep their own files private; what apt installs is the system's)
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# written by shardstock deploy/lib.sh while apt runs\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    made=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || rc=$?
  [ "$rc" = 0 ] && { as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || rc=$?; }
  [ -n "$made" ] && as_root rm -f "$policy"
  if [ -d /run/systemd/system ]; then
    for s in "${services[@]}"; do as_root systemctl disable --now "$s" >/dev/null 2>&1 || true; done
  fi
  umask "$mask"
  return "$rc"
}

# service_user NAME: the OS user a service the deploy scripts start runs as
# when they run as root: the system user NAME (made once, no home, no
# shell), never root; "" for a non-root caller (the service runs as it).
service_user() {
  [ "$(id -u)" = 0 ] || return 0
  if ! id "$1" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$1"
  fi
  echo "$1"
}
