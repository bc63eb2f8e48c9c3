#!/usr/bin/env bash
# Issue 28: the whole suite a second time, on torch 2.14.1 and a second Python (3.12), in a venv of its
# own. PyPI's torch 2.14.1 for Python 3.12 is a CUDA build (about 3 GB, downloaded from the registry;
# it runs on the CPU). Where that install fails (no such Python, the download refused), the run falls
# back to Python 3.11, whose torch 2.14.1 lies on this machine's disk, and says so: torch 2.14.1 is
# tested either way.
#   bash .ci/second_torch.sh [PYTHON_VERSION]      default 3.12: install, then the suite
#   bash .ci/second_torch.sh install DIR [PYTHON_VERSION]; bash .ci/second_torch.sh test DIR
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TORCH=2.14.1
phase=all
if [ "${1:-}" = install ] || [ "${1:-}" = test ]; then
  phase=$1; work=$2; want=${3:-3.12}  # the caller's folder, kept
else
  want=${1:-3.12}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

find_python() {
  for cand in "python$1" "$HOME/.pyenv/versions/$1"*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import sys; assert sys.version.startswith('$1.')" 2>/dev/null; then
      echo "$cand"; return 0
    fi
  done
  return 1
}

install() {  # $1: python version; a venv with torch $TORCH and the package with its test extra
  local py
  py=$(find_python "$1") || { echo "second torch: python$1 not found"; return 1; }
  rm -rf "$work/venv"
  "$py" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --upgrade pip &&
    "$work/venv/bin/python" -m pip install --quiet "torch==$TORCH" &&
    "$work/venv/bin/python" -m pip install --quiet "$ROOT[test]"
}

# install and test apart, or both (what .ci/run runs in the background beside the main suite)
vpy="$work/venv/bin/python"
if [ "$phase" != test ]; then
  start=$(date +%s)
  if ! install "$want"; then
    echo "second torch: torch $TORCH on python$want could not be installed; falling back to python3.11"
    install 3.11
  fi
  echo "second torch: installed in $(( $(date +%s) - start )) s: $("$vpy" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)')"
fi
if [ "$phase" != install ]; then
  start=$(date +%s)
  used=$("$vpy" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # from the tree, so the tests' own helpers (tests/) import; the package is the venv's installed one
  "$vpy" -m pytest -q -p no:cacheprovider
  echo "second torch: the whole suite passed on python$used, torch $TORCH in $(( $(date +%s) - start )) s"
fi
