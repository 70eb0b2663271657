#!/bin/sh
# Prints the first of the Pythons named on the command line that this course supports and that
# can create a virtual environment (a name pyenv installed but did not select included). When none can, it says in one line what to install and exits 1.
# The supported versions are pyproject.toml's requires-python (">=3.A,<3.B").
#   sh scripts/find_python.sh python3.11 python3.12 python3    (what `make` runs with $(PYTHON))
range=$(sed -n 's/^requires-python = ">=3\.\([0-9]*\),<3\.\([0-9]*\)".*/\1 \2/p' \
  "$(dirname "$0")/../pyproject.toml")
[ -n "$range" ] || { echo "$0 cannot read requires-python (\">=3.A,<3.B\") in pyproject.toml" >&2; exit 1; }
low=${range% *}
high=$((${range#* } - 1))

# How to get Python 3.$low, the version the course's tests run on, on this system.
if [ "$(uname -s)" = Darwin ]; then
  get="brew install python@3.$low"
elif command -v apt-get >/dev/null 2>&1; then
  get="sudo apt install python3.$low python3.$low-venv"
else
  get="see https://www.python.org/downloads/"
fi

# A name pythonX.Y that does not run may still be installed by pyenv: a pyenv shim runs only the
# versions pyenv was told to select, but each installed one is in $(pyenv root)/versions/X.Y.Z.
# Prints the newest such X.Y.Z's interpreter; nothing when pyenv has none.
pyenv_python() {
  case $1 in python[0-9]*.[0-9]*) ;; *) return 1 ;; esac
  if command -v pyenv >/dev/null 2>&1; then root=$(pyenv root 2>/dev/null); else root=${PYENV_ROOT:-$HOME/.pyenv}; fi
  [ -d "$root/versions" ] || return 1
  newest=""
  for folder in "$root/versions/${1#python}".*; do
    case ${folder##*/} in *[!0-9.]*) continue ;; esac  # 3.12.1 yes; 3.12-dev, 3.12.0rc1 no
    [ -x "$folder/bin/$1" ] || continue
    patch=${folder##*.}
    if [ -z "$newest" ] || [ "$patch" -gt "${newest##*.}" ]; then newest=$folder; fi
  done
  [ -n "$newest" ] && echo "$newest/bin/$1"
}

unsupported=""  # the Pythons found outside the range, e.g. "python3 is Python 3.9"
no_venv=""      # the first supported Python that cannot create a venv, and its minor version
for name in "$@"; do
  python=$name
  # A name that does not run (absent, or a pyenv shim for a version not selected) is skipped,
  # unless pyenv has that version installed.
  version=$("$python" -c 'import sys; print("%d %d" % sys.version_info[:2])' 2>/dev/null) || {
    python=$(pyenv_python "$name") || continue
    version=$("$python" -c 'import sys; print("%d %d" % sys.version_info[:2])' 2>/dev/null) || continue
  }
  major=${version% *}
  minor=${version#* }
  if [ "$major" != 3 ] || [ "$minor" -lt "$low" ] || [ "$minor" -gt "$high" ]; then
    unsupported="${unsupported:+$unsupported, }$python is Python $major.$minor"
  # Debian and Ubuntu ship ensurepip apart (python3.X-venv); without it `-m venv` fails half-way.
  elif ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    [ -n "$no_venv" ] || { no_venv=$python; no_venv_minor=$minor; }
  else
    command -v "$python"
    exit 0
  fi
done

if [ -n "$no_venv" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    fix="sudo apt install python3.$no_venv_minor-venv"
  else
    fix="install a Python 3.$no_venv_minor that includes ensurepip"
  fi
  echo "$no_venv cannot create a virtual environment (its ensurepip module is missing): $fix, then run make again" >&2
elif [ -n "$unsupported" ]; then
  echo "$unsupported; this course needs Python 3.$low to 3.$high: $get, then run make again" >&2
else
  echo "no Python found (tried $*); this course needs Python 3.$low to 3.$high: $get, then run make again" >&2
fi
exit 1
