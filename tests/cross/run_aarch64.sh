#!/usr/bin/env bash
# Builds tests/cross/core_test.cpp with the Python-free native core (csrc/core) twice: natively, and
# cross-compiled for aarch64 (aarch64-linux-gnu-g++, static) to run under qemu-user (qemu-aarch64).
# No Python, no pybind11, no CMake: the core must compile on its own.
#
#   tests/cross/run_aarch64.sh                    # native + aarch64 under qemu, clean sources
#   tests/cross/run_aarch64.sh --plant recorder   # aarch64 only, with a planted bug: must FAIL
#   tests/cross/run_aarch64.sh --only native      # or --only aarch64
#
# --plant clock|calibration|recorder defines WARMPROF_PLANT_BUG_<NAME>, which switches on a marked
# bug in csrc/core (clock.h's cntvct_el0 read steps back, clock.cpp's slope 3x off, recorder.cpp's
# drain unsorted). The main build never defines these.
#
# Exit status: 0 every run passed; 1 a core test failed; 2 a build failed, a run crashed or timed
# out, or bad arguments; 77 the cross toolchain or qemu-aarch64 is missing (nothing ran).
# Env: AARCH64_CXX (aarch64-linux-gnu-g++), QEMU_AARCH64 (qemu-aarch64, else qemu-aarch64-static),
# CXX (native; g++), BUILD_DIR (a temporary directory, removed afterwards).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PLANT=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --plant) PLANT="${2:-}"; shift 2 ;;
    --only) ONLY="${2:-}"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run_aarch64.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$PLANT" in
  ""|clock|calibration|recorder) ;;
  *) echo "run_aarch64.sh: --plant takes clock, calibration or recorder" >&2; exit 2 ;;
esac
case "$ONLY" in
  "") if [ -n "$PLANT" ]; then ONLY=aarch64; else ONLY=both; fi ;;
  native|aarch64) ;;
  *) echo "run_aarch64.sh: --only takes native or aarch64" >&2; exit 2 ;;
esac

SOURCES=(tests/cross/core_test.cpp csrc/core/clock.cpp csrc/core/recorder.cpp csrc/core/host.cpp
         csrc/core/watch.cpp csrc/core/fd_tap.cpp)
FLAGS=(-std=c++17 -O2 -Wall -Wextra -Wno-format-truncation -pthread -I"$ROOT/csrc")
[ -n "$PLANT" ] && FLAGS+=("-DWARMPROF_PLANT_BUG_$(echo "$PLANT" | tr '[:lower:]' '[:upper:]')")

XCXX="${AARCH64_CXX:-aarch64-linux-gnu-g++}"
QEMU="${QEMU_AARCH64:-}"
if [ -z "$QEMU" ]; then
  for q in qemu-aarch64 qemu-aarch64-static; do
    if command -v "$q" >/dev/null 2>&1; then QEMU="$q"; break; fi
  done
fi
if [ "$ONLY" != native ]; then
  missing=()
  command -v "$XCXX" >/dev/null 2>&1 || missing+=("$XCXX (Debian: g++-aarch64-linux-gnu)")
  [ -n "$QEMU" ] && command -v "$QEMU" >/dev/null 2>&1 || missing+=("qemu-aarch64 (Debian: qemu-user)")
  if [ ${#missing[@]} -gt 0 ]; then
    echo "run_aarch64.sh: SKIP: missing ${missing[*]}" >&2
    exit 77
  fi
fi

OWN_BUILD=""
if [ -z "${BUILD_DIR:-}" ]; then
  BUILD_DIR="$(mktemp -d)"
  OWN_BUILD="$BUILD_DIR"
fi
trap '[ -n "$OWN_BUILD" ] && rm -rf "$OWN_BUILD"' EXIT

# build NAME CXX [extra link flags...]: every source compiled in parallel, then linked.
build() {
  local name="$1" cxx="$2"; shift 2
  local dir="$BUILD_DIR/$name" pids=() objs=() f o rc=0
  mkdir -p "$dir"
  for f in "${SOURCES[@]}"; do
    o="$dir/$(basename "$f").o"
    objs+=("$o")
    "$cxx" "${FLAGS[@]}" -c "$ROOT/$f" -o "$o" 2>>"$dir/build.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc -ne 0 ] || ! "$cxx" "${FLAGS[@]}" "${objs[@]}" -o "$dir/core_test" "$@" 2>>"$dir/build.log"; then
    echo "run_aarch64.sh: BUILD FAILED ($name, $cxx):" >&2
    cat "$dir/build.log" >&2
    return 1
  fi
  if [ -s "$dir/build.log" ]; then cat "$dir/build.log" >&2; fi
}

# run NAME CMD...: runs the test, maps its status (0 pass, 1 a check failed, else crashed/timed out).
run() {
  local name="$1"; shift
  local start end rc
  start=$(date +%s.%N)
  timeout 180 "$@"
  rc=$?
  end=$(date +%s.%N)
  echo "== $name: exit $rc in $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b-a}') s"
  case $rc in
    0) return 0 ;;
    1) return 1 ;;
    124) echo "run_aarch64.sh: $name timed out" >&2; return 2 ;;
    *) echo "run_aarch64.sh: $name crashed (status $rc)" >&2; return 2 ;;
  esac
}

status=0
note() { [ "$1" -gt "$status" ] && status="$1"; return 0; }

if [ "$ONLY" = native ] || [ "$ONLY" = both ]; then
  CXX_NATIVE="${CXX:-g++}"
  echo "== native $(uname -m) build ($CXX_NATIVE${PLANT:+, planted bug: $PLANT})"
  if build native "$CXX_NATIVE"; then
    run "native $(uname -m)" "$BUILD_DIR/native/core_test"; note $?
  else
    note 2
  fi
fi

if [ "$ONLY" = aarch64 ] || [ "$ONLY" = both ]; then
  echo "== aarch64 cross build ($("$XCXX" --version | head -1)${PLANT:+, planted bug: $PLANT})"
  # Static: qemu-aarch64 then needs no sysroot. Where the cross libc has no static archives, a
  # dynamic build run with the cross sysroot (-L) instead.
  QEMU_ARGS=()
  if build aarch64 "$XCXX" -static; then
    :
  else
    SYSROOT="$("$XCXX" -print-sysroot 2>/dev/null)"
    [ -z "$SYSROOT" ] || [ "$SYSROOT" = / ] && SYSROOT="/usr/aarch64-linux-gnu"
    echo "run_aarch64.sh: static link failed; dynamic, run with -L $SYSROOT" >&2
    build aarch64 "$XCXX" || exit 2
    QEMU_ARGS=(-L "$SYSROOT")
  fi
  if command -v file >/dev/null 2>&1; then file -b "$BUILD_DIR/aarch64/core_test" | cut -d, -f1-2; fi
  echo "== aarch64 run under $("$QEMU" --version | head -1)"
  WARMPROF_CORE_TEST_EMULATED=1 run "aarch64 under qemu-user" "$QEMU" "${QEMU_ARGS[@]}" "$BUILD_DIR/aarch64/core_test"
  note $?
fi
exit "$status"
