#!/usr/bin/env bash
# The GPU proof, whole, in one device call: run from the checkout root on the lent GPU machine,
#   run(command="bash bench/gpu_proof.sh", timeout_s=560)
# It keeps itself within 540 s (bench/gpu_proof/prove.py says how, and which phases in what order)
# and writes summary.txt, summary.json, results.tgz and logs.tgz into $OUT (./proof-out when unset)
# as each phase ends. Without a GPU it says NO GPU per phase and ends in seconds (exit 3).
# PYTHON picks the interpreter (default python3: the one with torch, where warmprof is built).
set -u
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON:-python3}" "$here/gpu_proof/prove.py" --out "${OUT:-./proof-out}" "$@"
