#!/usr/bin/env bash
# Install Debian's chromium for the browser test (headless, driven by chromedp).
#   deploy/chromium.sh install
set -euo pipefail
source "$(dirname "$0")/lib.sh"
case "${1:-install}" in
  install)
    command -v chromium >/dev/null && exit 0
    echo "chromium.sh: installing chromium from Debian"
    apt_install -- chromium ;;
  *) echo "usage: deploy/chromium.sh install" >&2; exit 2 ;;
esac
