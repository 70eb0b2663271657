#!/bin/sh
# Installs torch alone into the course's venv, before the rest, and when pip cannot, says in one
# line why: for which Python, which torch, from which index, and what to run instead. pip alone
# says "conflicting dependencies" or "no matching distribution" whether the index was out of reach
# or has no build for this Python.
#   sh scripts/install_torch.sh VENV/bin/python 'torch==X.Y.Z' INDEX    (what `make setup` runs)
# INDEX empty: PyPI. --no-deps: torch's own dependencies come with the rest. 2 retries instead of
# pip's 5: an index that cannot be reached then costs about 1 s, not 8.
python=$1
torch=$2
index=$3
log="$(dirname "$(dirname "$python")")/pip-torch.log"  # in the venv, beside bin/

"$python" -m pip install --quiet --no-deps --retries 2 ${index:+--index-url "$index"} "$torch" 2>"$log" && exit 0

version=$("$python" -c 'import platform; print(platform.python_version())')
system=$("$python" -c 'import platform; print(platform.system(), platform.machine())')
source=${index:-PyPI}
pypi="run make again with TORCH_INDEX= to take PyPI's build instead (on Linux the CUDA one, several GB)"
# pip's words for a connection that failed, from its warning before each retry to its last error.
if grep -q -e 'connection broken by' -e 'NewConnectionError' -e 'NameResolutionError' -e 'Failed to resolve' \
    -e 'Max retries exceeded' -e 'Could not fetch URL' -e 'ProxyError' "$log"; then
  why="$source could not be reached"
  if [ -n "$index" ]; then
    fix="$pypi, or check the connection"
  else
    fix="check the connection (or pip's proxy settings), then run make again"
  fi
elif grep -q -e 'conflicting dependencies' -e 'No matching distribution found' "$log"; then
  why="$source has no build of it for Python $version on $system"
  if [ -n "$index" ]; then
    fix="$pypi, or choose another Python with PYTHON="
  else
    fix="choose a Python that has one, e.g. make setup PYTHON=python3.11"
  fi
else
  why="pip stopped with: $(grep 'ERROR' "$log" | tail -n 1)"
  fix="fix that, then run make again"
fi
echo "cannot install $torch for Python $version ($python): $why; $fix (pip's own output: $log)" >&2
exit 1
