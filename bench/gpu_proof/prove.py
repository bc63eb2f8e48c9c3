"""The GPU proof: what the CUDA path does on a real GPU, settled in one device call of at most 540 s.

    bash bench/gpu_proof.sh                   # the run tool: timeout_s=560 (RUN_TIMEOUT_S), OUT set by it
    python3 bench/gpu_proof/prove.py [--out DIR] [--only facts,build,...] [--budget-s 540]

Phases, in this order, each a fresh process group cut at its deadline:
  facts          uname, nvidia-smi (clocks now and max), versions, the libcupti `import torch` maps,
                 the allocator backend (facts.py); its GPU gate decides NO GPU for the phases after
  build          pip install --no-build-isolation --no-deps . (build.py; that machine has no network)
  seq            raw CUPTI callback sequences per operation, a ctypes subscriber with no warmprof code,
                 then warmprof's own subscriber (seq_probe.py): the differential
  kineto         torch.profiler (kineto) and warmprof's subscriber, each first (kineto_interplay.py)
  ab             the demo LM's first pass without and with warmprof's subscription (ab_first_pass.py)
  trace_eager, trace_compile, trace_ro
                 warmprof trace --demo --device cuda [--compile [reduce-overhead]]
  gpu_check      bench/gpu_check.py's table: its op phases, the two traces above as its eager and compiled
  run_cuda       warmprof run -- python (a CUDA start, matmul, 256 MiB, a graph capture): the cuda init
                 phase, CUPTI on or why not, CUPTI's time per cause (run_cuda.py; issue 41's CUDA phases)

The budget: phase i must end by START_S + the sum of (cap + MARGIN_S) of phases 1..i, so a phase may
use what the phases before it left unused and never what the ones after it are owed; FINISH_S is
kept for the last writing. tests/unit/test_gpu_proof_budget.py checks the plan fits BUDGET_S (540 s)
and the call's timeout (RUN_TIMEOUT_S, under the run tool's 600 s a command). Past BUDGET_S +
HARD_SLACK_S, or on SIGTERM, the running phase is killed, the summary written, and the proof exits.

Out (in --out, default $OUT or ./proof-out), all four rewritten as each phase ends, so a run cut
short keeps what finished (the run tool brings back at most 8 files; these stay a few MB):
  summary.txt    one line a phase (status, seconds, limit) with its digest, then the CUPTI verdict:
                 CUPTI WORKS, REFUSED BY THE PLATFORM (the raw ctypes subscribe fails too) or
                 WARMPROF BROKEN (the raw subscribe works and warmprof's does not)
  summary.json   the same as data
  results.tgz    each phase's result (<phase>.json)
  logs.tgz       each phase's output (<phase>.log; a long one keeps its head and tail)
Without a GPU every phase says NO GPU and the proof ends in seconds.
Exit: 0 every phase OK; 1 a phase failed, timed out or was skipped; 3 no GPU here.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import proof_digest as digests  # noqa: E402
from proof_common import DEADLINE_VAR, EXIT_NO_GPU  # noqa: E402

BUDGET_S = 540.0  # the whole proof, its start to its last file
RUN_TOOL_MAX_S = 600  # the run tool's most for one command
RUN_TIMEOUT_S = 560  # the timeout_s to call the proof with
START_S = 2.0  # the driver's own start, before the first phase
MARGIN_S = 1.5  # a phase's spawn, kill and writing out, past its cap
FINISH_S = 5.0  # after the last phase: the verdict and the files
HARD_SLACK_S = 5.0  # past the budget the driver cuts itself (only a hang of its own gets there)
MIN_PHASE_S = 3.0  # a phase with less than this to its deadline is skipped
EXIT_FAILED = 1
RESULT = "result.json"
OUT_FILES = ("summary.txt", "summary.json", "results.tgz", "logs.tgz")
LOG_HEAD_BYTES = 256 << 10  # of a long log, its head and tail are kept
LOG_TAIL_BYTES = 1 << 20
RESULT_MAX_BYTES = 4 << 20  # a result file above this keeps its head only
ARCHIVE_MAX_BYTES = 4 << 20  # logs.tgz: the kept head and tail shrink until it fits
PY = sys.executable
# Every cache a first pass may find warm, pointed at the phase's own empty folder.
CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "PYTORCH_KERNEL_CACHE_PATH",
              "CUPY_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


@dataclass(frozen=True)
class Phase:
    name: str
    cap_s: float
    what: str
    argv: Callable[[Path, float], list[str]]  # (the phase's folder, its time limit) -> its command
    needs_gpu: bool = True
    ok_rcs: tuple[int, ...] = (0,)  # exit codes that mean the phase did its work


def _script(file: str) -> Callable[[Path, float], list[str]]:
    return lambda d, limit: [PY, str(HERE / file), str(d / RESULT)]


def _trace(*extra: str) -> Callable[[Path, float], list[str]]:
    # Its progress lines stay on (in the log): a trace cut at its deadline shows where it was.
    return lambda d, limit: [PY, "-m", "warmprof", "trace", "--demo", "--device", "cuda", "--steady", "10",
                             "--json", str(d / RESULT), *extra]


def _gpu_check(d: Path, limit: float) -> list[str]:
    traces = d.parent
    return [PY, str(ROOT / "bench" / "gpu_check.py"), "--only", "callbacks,attribution",
            "--trace-json", f"eager={traces / 'trace_eager' / RESULT}",
            "--trace-json", f"compiled={traces / 'trace_compile' / RESULT}",
            "--budget-s", f"{max(1.0, limit - 3):.0f}", "--json", str(d / RESULT)]


PHASES: tuple[Phase, ...] = (
    Phase("facts", 20, "uname, clocks, versions, the libcupti torch maps, the allocator backend", _script("facts.py"),
          needs_gpu=False),
    Phase("build", 75, "pip install --no-build-isolation --no-deps .", _script("build.py")),
    Phase("seq", 45, "raw CUPTI callback sequences per operation (ctypes, no warmprof code), then warmprof's",
          _script("seq_probe.py")),
    Phase("kineto", 50, "torch.profiler (kineto) and warmprof's subscriber, each first", _script("kineto_interplay.py")),
    Phase("ab", 50, "the first pass without and with warmprof's subscription, fresh processes",
          _script("ab_first_pass.py")),
    Phase("trace_eager", 45, "warmprof trace --demo --device cuda", _trace()),
    Phase("trace_compile", 75, "warmprof trace --demo --device cuda --compile", _trace("--compile")),
    Phase("trace_ro", 60, "warmprof trace --demo --device cuda --compile reduce-overhead",
          _trace("--compile", "reduce-overhead")),
    Phase("gpu_check", 70, "bench/gpu_check.py's table (the traces above as its eager and compiled)", _gpu_check,
          ok_rcs=(0, 1)),  # 1: it ran and some rows FAILED (the digest lists them)
    Phase("run_cuda", 25, "warmprof run on a CUDA script (no vLLM): cuda init phase, CUPTI's causes",
          _script("run_cuda.py")),
)


def deadlines(phases: Sequence[Phase]) -> list[float]:
    """Each phase's deadline in seconds from the start: START_S and the caps and margins up to it."""
    out, t = [], START_S
    for ph in phases:
        t += ph.cap_s + MARGIN_S
        out.append(t)
    return out


def planned_s(phases: Sequence[Phase]) -> float:
    """The longest the proof can take by its plan: the last deadline and FINISH_S."""
    return (deadlines(phases)[-1] if phases else START_S) + FINISH_S


# ---- what goes back: capped logs, results, the summary --------------------------------------------

def cap_log(data: bytes, head: int = LOG_HEAD_BYTES, tail: int = LOG_TAIL_BYTES) -> bytes:
    if len(data) <= head + tail:
        return data
    left_out = len(data) - head - tail
    return data[:head] + f"\n[... {left_out} bytes left out ...]\n".encode() + data[-tail:]


def tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def logs_archive(logs: dict[str, bytes], limit: int = ARCHIVE_MAX_BYTES) -> bytes:
    """The logs, each capped to its head and tail, halving what is kept until the archive fits."""
    head, tail = LOG_HEAD_BYTES, LOG_TAIL_BYTES
    while True:
        data = tgz({name: cap_log(raw, head, tail) for name, raw in logs.items()})
        if len(data) <= limit or tail < 4096:
            return data
        head, tail = head // 2, tail // 2


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"tmp-{path.name}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _commit() -> str:
    try:
        p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=5)
        return p.stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


class Proof:
    """The phases run in order against one clock; every record and file rewritten as a phase ends."""

    def __init__(self, phases: Sequence[Phase], out: Path, work: Path, budget_s: float = BUDGET_S) -> None:
        self.phases, self.out, self.work, self.budget_s = list(phases), out, work, budget_s
        self.t0 = time.monotonic()
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.commit = _commit()
        self.records: list[dict[str, Any]] = [{"name": p.name, "what": p.what, "cap_s": p.cap_s, "status": "PENDING"}
                                              for p in phases]
        self.results: dict[str, Any] = {}
        self.gpu: dict[str, Any] | None = None  # the facts phase's gate
        self.running: int | None = None  # the running phase's process group
        self.verdict: dict[str, str] | None = None
        self.exit_code: int | None = None

    # -- running --------------------------------------------------------------------------------
    def run(self) -> int:
        for ph, rec, end in zip(self.phases, self.records, deadlines(self.phases)):
            self._run_phase(ph, rec, self.t0 + end - MARGIN_S)
            print(self.phase_line(rec), flush=True)
            self.write()
        return self.finish()

    def _run_phase(self, ph: Phase, rec: dict[str, Any], end_at: float) -> None:
        d = self.work / ph.name
        d.mkdir(parents=True, exist_ok=True)
        if ph.needs_gpu and self.gpu is not None and not self.gpu.get("available"):
            rec.update(status="NO GPU", note=str(self.gpu.get("reason", "")), seconds=0.0)
            return
        limit = end_at - time.monotonic()
        if limit < MIN_PHASE_S:
            rec.update(status="SKIPPED", note=f"the budget is spent ({limit:.1f} s to its deadline)", seconds=0.0)
            return
        rec.update(status="RUNNING", limit_s=round(limit, 1))
        self.write(summary_only=True)
        t = time.monotonic()
        rc = self._spawn(ph.argv(d, limit), limit, d)
        rec["seconds"] = round(time.monotonic() - t, 1)
        rec["rc"] = rc
        result = self._result(d)
        self.results[ph.name] = result
        if ph.name == "facts" and isinstance(result.get("gpu"), dict):
            self.gpu = result["gpu"]
        if rc is None:
            rec.update(status="TIMED OUT", note=f"killed at its deadline ({limit:.0f} s)")
        elif rc == EXIT_NO_GPU:
            rec.update(status="NO GPU", note=str(result.get("no_gpu") or (result.get("gpu") or {}).get("reason", "")))
        elif rc in ph.ok_rcs:
            rec.update(status="OK", note="" if rc == 0 else f"exit {rc}")
        else:
            rec.update(status="FAILED", note=f"exit {rc}: {self._last_line(d)}")
        rec["digest"] = digests.digest(ph.name, result)

    def _env(self, d: Path, limit: float) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env[DEADLINE_VAR] = f"{time.time() + limit:.1f}"
        for var in CACHE_VARS:
            env[var] = str(d / "caches" / var.lower())
            os.makedirs(env[var], exist_ok=True)
        headers = HERE / "cuda-include"  # optional: a CUDA 13.0 include folder the build uses as it is
        if headers.is_dir():
            env["WARMPROF_CUDA_INCLUDE_DIRS"] = str(headers)
        return env

    def _spawn(self, argv: list[str], limit: float, d: Path) -> int | None:
        """The phase's command in its own process group, output to its log; its exit code, or None
        when it ran to its limit. The whole group goes when it returns (compile workers too)."""
        with open(d / "log.txt", "wb") as log:
            try:
                p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self._env(d, limit), cwd=d,
                                     start_new_session=True)
            except OSError as e:
                log.write(f"could not start {argv[:3]}: {e}\n".encode())
                return 127
            self.running = p.pid
            try:
                rc: int | None = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _kill_group(p.pid)
                p.wait()
                self.running = None
        return rc

    @staticmethod
    def _result(d: Path) -> dict[str, Any]:
        try:
            got = json.loads((d / RESULT).read_text())
            return got if isinstance(got, dict) else {"value": got}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            return {"error": f"unreadable result: {e}"}

    @staticmethod
    def _last_line(d: Path) -> str:
        try:
            lines = [ln for ln in (d / "log.txt").read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def finish(self) -> int:
        statuses = [r["status"] for r in self.records]
        no_gpu = (self.gpu is not None and not self.gpu.get("available")) or (
            bool(statuses) and all(s == "NO GPU" for s in statuses))
        if no_gpu:
            why = (self.gpu or {}).get("reason") or next((r.get("note") for r in self.records if r.get("note")), "")
            self.verdict = {"verdict": "no_gpu", "text": f"NO GPU: nothing settled ({why})"}
        elif any(r["name"] in ("seq", "ab") and r["status"] not in ("PENDING", "NO GPU", "SKIPPED")
                 for r in self.records):
            self.verdict = digests.cupti_verdict(self.results.get("seq"), self.results.get("ab"))
        else:
            self.verdict = {"verdict": digests.NOT_SETTLED, "text": "NOT SETTLED: neither seq nor ab ran"}
        self.exit_code = EXIT_NO_GPU if no_gpu else (0 if all(s == "OK" for s in statuses) else EXIT_FAILED)
        self.write()
        return self.exit_code

    def cut(self, why: str) -> None:
        """The proof itself is cut (its hard limit, SIGTERM): the running phase goes, the files stay."""
        if self.running is not None:
            _kill_group(self.running)
        for rec in self.records:
            if rec["status"] == "RUNNING":
                rec.update(status="TIMED OUT", note=why, seconds=round(time.monotonic() - self.t0, 1))
        self.verdict = {"verdict": digests.NOT_SETTLED, "text": f"NOT SETTLED: the proof was cut ({why})"}
        self.exit_code = EXIT_FAILED
        self.write()

    # -- writing --------------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    @staticmethod
    def phase_line(rec: dict[str, Any]) -> str:
        took = f" in {rec['seconds']:.1f} s" if rec.get("seconds") else ""
        limit = f" (limit {rec['limit_s']:.0f} s)" if rec.get("limit_s") else ""
        note = f": {rec['note']}" if rec.get("note") else ""
        return f"phase {rec['name']}: {rec['status']}{took}{limit}{note}"

    def summary_text(self) -> str:
        lines = [f"warmprof GPU proof: commit {self.commit}, started {self.started}, budget {self.budget_s:.0f} s "
                 f"(planned {planned_s(self.phases):.1f} s)"]
        for rec in self.records:
            lines.append(self.phase_line(rec))
            lines += [f"    {ln}" for ln in rec.get("digest", [])]
        if self.verdict is not None:
            lines.append(f"CUPTI: {self.verdict['text']}")
        lines.append(f"total {self.elapsed_s():.1f} s" + (f"; exit {self.exit_code}" if self.exit_code is not None else
                                                           "; still running"))
        return "\n".join(lines) + "\n"

    def summary_data(self) -> dict[str, Any]:
        return {"commit": self.commit, "started": self.started, "budget_s": self.budget_s,
                "planned_s": planned_s(self.phases), "elapsed_s": round(self.elapsed_s(), 1),
                "phases": self.records, "cupti": self.verdict, "exit": self.exit_code}

    def write(self, summary_only: bool = False) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(self.out / "summary.txt", self.summary_text().encode())
        write_atomic(self.out / "summary.json", json.dumps(self.summary_data(), indent=1, default=str).encode())
        if summary_only:
            return
        results, logs = {}, {}
        for ph in self.phases:
            d = self.work / ph.name
            if (d / RESULT).is_file():
                raw = (d / RESULT).read_bytes()
                results[f"{ph.name}.json"] = raw if len(raw) <= RESULT_MAX_BYTES else raw[:RESULT_MAX_BYTES] + (
                    f"\n[... {len(raw) - RESULT_MAX_BYTES} bytes left out ...]\n".encode())
            if (d / "log.txt").is_file():
                logs[f"{ph.name}.log"] = (d / "log.txt").read_bytes()
        write_atomic(self.out / "results.tgz", tgz(results))
        write_atomic(self.out / "logs.tgz", logs_archive(logs))


_proof: list[Proof] = []  # the one running, for the signal handlers


def _on_signal(signum: int, _frame: Any) -> None:
    why = "its hard limit" if signum == signal.SIGALRM else f"signal {signal.Signals(signum).name}"
    for proof in _proof:
        proof.cut(f"the proof was cut: {why}")
        print(proof.summary_text(), flush=True)
    os._exit(EXIT_FAILED)


def main(argv: list[str] | None = None, phases: Sequence[Phase] = PHASES) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "proof-out", help="where the four files go")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help=f"the whole proof's limit (default {BUDGET_S:.0f})")
    ap.add_argument("--only", help="comma-separated phases, in their order (default all: "
                                   + ",".join(p.name for p in phases) + ")")
    ap.add_argument("--work", help="the phases' folders (default a temporary folder, removed at the end)")
    args = ap.parse_args(argv)
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in {p.name for p in phases}]
        if unknown:
            ap.error(f"unknown phases {unknown}")
        phases = [p for p in phases if p.name in names]
    if planned_s(phases) > args.budget_s:
        ap.error(f"the phases' plan takes {planned_s(phases):.0f} s, more than --budget-s {args.budget_s:.0f}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="warmprof-proof-"))
    proof = Proof(phases, Path(args.out), work, args.budget_s)
    _proof[:] = [proof]
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGALRM, _on_signal)
    signal.alarm(max(1, int(args.budget_s + HARD_SLACK_S)))
    try:
        rc = proof.run()
    finally:
        signal.alarm(0)
        _proof.clear()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(proof.summary_text(), end="", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
