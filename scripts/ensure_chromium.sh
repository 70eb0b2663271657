#!/usr/bin/env bash
# Chromium for the browser test: Debian's package when we are root on Debian (as in CI).
# Elsewhere Playwright's own browser is used (`python -m playwright install chromium`), and
# the browser test fails with a message saying what to install if neither can be found.
set -euo pipefail
if [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser test"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "note: no system Chromium; the browser test will use Playwright's own browser" >&2
fi
