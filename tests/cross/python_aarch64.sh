#!/usr/bin/env bash
# By hand, not in CI: the whole extension (warmprof._native) cross-built for aarch64 and imported by
# Debian bookworm's arm64 python3.11 under qemu-user. Debian arm64 packages (python3.11, its headers,
# numpy) are fetched with apt-get into a private state directory (this machine's apt setup is not
# touched) and unpacked with dpkg -x into a sysroot; CMake cross-builds the repository's own
# CMakeLists.txt (no CUDA) with aarch64-linux-gnu-g++; qemu-aarch64 -L sysroot runs python.
#
#   tests/cross/python_aarch64.sh [WORKDIR] [pytest args...]   # WORKDIR: /tmp/warmprof-aarch64
#
# Without pytest args it imports warmprof and records, drains and converts one span. With them it
# runs pytest (the host venv's pure-Python pytest copied in) under the arm64 python, e.g.
#   tests/cross/python_aarch64.sh /tmp/warmprof-aarch64 tests/native/test_clock_calibration.py
# Needs: apt-get (Debian mirrors reachable), dpkg, cmake, ninja, pybind11 and pytest in the host
# Python (PYTHON, default python3). Exit 77: packages could not be fetched or a tool is missing.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-/tmp/warmprof-aarch64}"
[ $# -gt 0 ] && shift
PY="${PYTHON:-python3}"
QEMU="$(command -v qemu-aarch64 || command -v qemu-aarch64-static || true)"
for tool in apt-get dpkg cmake ninja aarch64-linux-gnu-g++; do
  command -v "$tool" >/dev/null || { echo "python_aarch64.sh: SKIP: $tool missing" >&2; exit 77; }
done
[ -n "$QEMU" ] || { echo "python_aarch64.sh: SKIP: qemu-aarch64 missing" >&2; exit 77; }
PYBIND11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')" ||
  { echo "python_aarch64.sh: SKIP: no pybind11 in $PY" >&2; exit 77; }

SYSROOT="$WORK/sysroot"
APT=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Dir::State::Lists="$WORK/apt/lists"
     -o Dir::Cache="$WORK/apt/cache" -o Dir::State::Status="$WORK/apt/status" -o Debug::NoLocking=1)
if [ ! -x "$SYSROOT/usr/bin/python3.11" ]; then
  mkdir -p "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial"
  touch "$WORK/apt/status"
  if ! apt-get "${APT[@]}" update -q >"$WORK/apt.log" 2>&1 ||
     ! apt-get "${APT[@]}" install -y -q --download-only --no-install-recommends \
         python3.11-minimal libpython3.11-stdlib libpython3.11-dev libstdc++6 python3-numpy >>"$WORK/apt.log" 2>&1; then
    echo "python_aarch64.sh: SKIP: could not fetch the arm64 packages (see $WORK/apt.log)" >&2
    exit 77
  fi
  rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
  for deb in "$WORK"/apt/cache/archives/*.deb; do dpkg -x "$deb" "$SYSROOT"; done
  # libblas3/liblapack3 name their libraries through update-alternatives (a postinst dpkg -x skips).
  ln -sf blas/libblas.so.3 "$SYSROOT/usr/lib/aarch64-linux-gnu/libblas.so.3"
  ln -sf lapack/liblapack.so.3 "$SYSROOT/usr/lib/aarch64-linux-gnu/liblapack.so.3"
fi

cat >"$WORK/aarch64.cmake" <<'EOF'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
EOF
# FindPython finds the host interpreter; the headers and the module suffix are the target's.
# Debian's python3.11/pyconfig.h includes <aarch64-linux-gnu/python3.11/pyconfig.h>: -idirafter.
cmake -S "$ROOT" -B "$WORK/build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$WORK/aarch64.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DWARMPROF_WITH_CUDA=OFF -DWARMPROF_VERSION=0.0.0+aarch64 \
  -Dpybind11_DIR="$PYBIND11_DIR" -DPython_EXECUTABLE="$(command -v "$PY")" \
  -DPython_INCLUDE_DIR="$SYSROOT/usr/include/python3.11" \
  -DPYTHON_MODULE_EXTENSION=.cpython-311-aarch64-linux-gnu.so -DPYTHON_MODULE_DEBUG_POSTFIX= \
  -DCMAKE_CXX_FLAGS="-idirafter $SYSROOT/usr/include" >"$WORK/cmake.log"
ninja -C "$WORK/build" >"$WORK/ninja.log"
rm -rf "$WORK/pkg" && mkdir -p "$WORK/pkg"
cp -r "$ROOT/python/warmprof" "$WORK/pkg/"
find "$WORK/pkg" -name '*.so' -delete
cp "$WORK/build/_native.cpython-311-aarch64-linux-gnu.so" "$WORK/pkg/warmprof/"
echo "== $(file -b "$WORK/pkg/warmprof/_native.cpython-311-aarch64-linux-gnu.so" | cut -d, -f1-2)"

PYPATH="$WORK/pkg:/usr/lib/python3/dist-packages"  # the latter inside the sysroot (qemu -L)
run_py() { "$QEMU" -L "$SYSROOT" -E PYTHONPATH="$PYPATH" "$SYSROOT/usr/bin/python3.11" "$@"; }
if [ $# -eq 0 ]; then
  run_py - <<'EOF'
import platform
import warmprof
from warmprof import _native, timeline
from warmprof.timeline import Recording
info = _native.clock_info()
print("==", platform.machine(), "python", platform.python_version(), "warmprof", warmprof.__version__)
print("== clock_info:", info)
assert platform.machine() == "aarch64" and info["source"] == "cntvct_el0" and info["samples"] > 0
nid = timeline.name_id("cross:span")
with Recording() as rec:
    timeline.begin(timeline.STRUCTURE, nid)
    timeline.sample_host()
    timeline.end(timeline.STRUCTURE, nid)
tl = rec.drain()
assert len(tl) >= 3 and (tl.ts_ns[1:] >= tl.ts_ns[:-1]).all(), tl
print("== recorded and drained", len(tl), "records; faults", _native.faults(), "rss", _native.rss_bytes())
EOF
else
  PURE="$WORK/purelib"
  if [ ! -d "$PURE/_pytest" ]; then
    mkdir -p "$PURE"
    SITE="$("$PY" -c 'import pathlib, pytest; print(pathlib.Path(pytest.__file__).parent.parent)')"
    for d in _pytest pytest pluggy iniconfig packaging py.py pygments; do
      [ -e "$SITE/$d" ] && cp -r "$SITE/$d" "$PURE/"
    done
    cp -r "$SITE"/pytest-*.dist-info "$SITE"/pluggy-*.dist-info "$SITE"/iniconfig-*.dist-info \
      "$SITE"/packaging-*.dist-info "$PURE/" 2>/dev/null || true
  fi
  PYPATH="$WORK/pkg:$PURE:/usr/lib/python3/dist-packages"
  cd "$ROOT" && run_py -m pytest -p no:cacheprovider "$@"
fi
