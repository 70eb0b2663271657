#!/usr/bin/env bash
# System packages the tests and grading use, from Debian when we are root on Debian (as in CI):
#   chromium    the browser test drives JupyterLab in it
#   bubblewrap  grading runs each submission's kernel in a sandbox (scripts/sandbox_kernel.py)
# Elsewhere: the browser test uses Playwright's own browser (`python -m playwright install
# chromium`) and fails with a message saying what to install if neither can be found; grading
# without bubblewrap still runs, unsandboxed, and warns.
set -euo pipefail
missing=()
{ [ -x /usr/bin/chromium ] || command -v chromium >/dev/null 2>&1; } || missing+=(chromium)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "note: not installed: ${missing[*]} (see scripts/ensure_system_packages.sh)" >&2
fi
