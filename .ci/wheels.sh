#!/usr/bin/env bash
# Issue 28: the wheel builds, imports and passes the native tests on each Python 3.10-3.13 found here
# (pyenv's python3.X, or on PATH). Each gets its own venv with only the build and test tools (no torch:
# the native core must not need it; the two native tests that drive a torch module skip there).
#   bash .ci/wheels.sh [3.10 3.11 ...]     default: 3.10 3.11 3.12 3.13
# A Python asked for and not found fails the run when WARMPROF_REQUIRE_PYTHONS=1, else it is said and skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.11 3.12 3.13)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for v in "${versions[@]}"; do
  py=""
  for cand in "python$v" "$HOME/.pyenv/versions/$v"*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import sys; assert sys.version.startswith('$v.')" 2>/dev/null; then
      py=$cand; break
    fi
  done
  if [ -z "$py" ]; then
    echo "wheels: python$v not found"
    [ "${WARMPROF_REQUIRE_PYTHONS:-0}" = 1 ] && failed=1
    continue
  fi
  start=$(date +%s)
  "$py" -m venv "$work/venv$v"
  vpy="$work/venv$v/bin/python"
  "$vpy" -m pip install --quiet --upgrade pip
  "$vpy" -m pip install --quiet scikit-build-core pybind11 numpy pytest
  "$vpy" -m pip wheel --quiet --no-deps --no-build-isolation -w "$work/wheels$v" "$ROOT"
  whl=$(ls "$work/wheels$v"/warmprof-*.whl)
  "$vpy" -m pip install --quiet --no-deps "$whl"
  # from a folder outside the tree, so the installed wheel (not python/) is what imports
  (cd "$work" && "$vpy" -c "import warmprof, sys; b = warmprof.backends(); print('wheels: python', sys.version.split()[0], sorted(b))")
  if (cd "$work" && "$vpy" -m pytest -q -p no:cacheprovider --rootdir "$ROOT" "$ROOT/tests/native" 2>&1 | tail -3); then
    echo "wheels: python$v $(basename "$whl") built, imported and passed tests/native in $(( $(date +%s) - start )) s"
  else
    echo "wheels: python$v: tests/native FAILED"; failed=1
  fi
done
exit $failed
