#!/usr/bin/env bash
# Schemathesis (PyPI), for the API contract test, in a virtual environment of
# its own (nothing is installed into the system's Python).
#
#   deploy/schemathesis.sh install   create the venv and install Schemathesis if missing
#   deploy/schemathesis.sh path      print the path of its st command
#
# environment:
#   SHARDSTOCK_SCHEMATHESIS_DIR   the venv (default ~/.cache/shardstock/schemathesis-VERSION)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
version=4.32.5
dir=${SHARDSTOCK_SCHEMATHESIS_DIR:-$HOME/.cache/shardstock/schemathesis-$version}

install() {
  [ -x "$dir/bin/st" ] && return
  command -v python3 >/dev/null || { echo "schemathesis.sh: installing python3 from Debian"; apt_install -- python3; }
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
    echo "schemathesis.sh: installing python3-venv from Debian"
    apt_install -- python3-venv
  fi
  echo "schemathesis.sh: installing schemathesis $version from PyPI into $dir"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "schemathesis==$version"
}

case "${1:-}" in
  install) install ;;
  path) echo "$dir/bin/st" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
