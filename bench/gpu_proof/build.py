"""The proof's build phase: warmprof built and installed on the GPU machine, then imported fresh.

    python3 build.py OUT.json

`pip install --no-build-isolation --no-deps -v <checkout>`: that machine has no network, and has
the build's own needs (scikit-build-core, pybind11, cmake, ninja, nvcc and CUDA's headers). pip's
output goes to this phase's log; the result keeps CMake's `warmprof:` lines (which CUDA headers the
backends were compiled against, or why they are stubs), the exit code, and what a fresh `import
warmprof` reports (backends(): whether CUPTI and CUDA events are compiled in, available, and why
not). With no GPU it builds nothing (it would replace this machine's warmprof) and exits 3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proof_common import exit_if_no_gpu, last_json_line, left_s, save  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEEP = ("warmprof:", "Successfully installed", "ERROR", "error:", "CMake Error")
IMPORT_CHECK = ("import json, torch, warmprof; "
                "print(json.dumps({'version': getattr(warmprof, '__version__', '?'), 'file': warmprof.__file__, "
                "'backends': warmprof.backends()}))")


def pip_install(result: dict, out: str) -> int:
    argv = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-v", ROOT]
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    kept: list[str] = []
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    assert p.stdout is not None
    for line in p.stdout:  # to the log as it comes; the lines that say what was built, kept
        sys.stdout.write(line)
        if any(k in line for k in KEEP) and len(kept) < 40:
            kept.append(line.strip()[:400])
            result["kept_lines"] = kept
            save(out, result)
    return p.wait()


def import_check() -> dict:
    """warmprof imported in a fresh process, away from the checkout (the installed copy)."""
    try:
        p = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True,
                           timeout=left_s(60), cwd="/")
    except subprocess.TimeoutExpired as e:
        return {"error": f"import timed out: {e}"}
    got = last_json_line(p.stdout)
    return got if p.returncode == 0 and isinstance(got, dict) else {"error": f"exit {p.returncode}: {p.stderr[-1500:]}"}


def main(out: str) -> int:
    exit_if_no_gpu(out)
    t0 = time.monotonic()
    result: dict = {"argv": "pip install --no-build-isolation --no-deps -v ."}
    save(out, result)
    result["rc"] = pip_install(result, out)
    result["pip_s"] = round(time.monotonic() - t0, 1)
    save(out, result)
    result["import"] = import_check()
    result["seconds"] = round(time.monotonic() - t0, 1)
    save(out, result)
    print(json.dumps({k: result[k] for k in ("rc", "pip_s", "import")}, default=str)[:3000], flush=True)
    return result["rc"] or (1 if "error" in result["import"] else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
