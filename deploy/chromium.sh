#!/usr/bin/env bash
# Install Debian's chromium for the browser test (headless, driven by chromedp).
#   deploy/chromium.sh install
set -euo pipefail
case "${1:-install}" in
  install)
    command -v chromium >/dev/null && exit 0
    echo "chromium.sh: installing chromium from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null ;;
  *) echo "usage: deploy/chromium.sh install" >&2; exit 2 ;;
esac
