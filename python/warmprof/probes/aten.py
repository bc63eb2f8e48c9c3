"""warmprof.probe_ops / probe_from: any aten op call, probed in a fresh process of its own.

Each call spec (opspec JSON) goes to a child (`python -m warmprof.probes.aten_child`, see there for
the order of the measurements) on stdin; its figures come back as JSON on stdout and are judged here
(aten_verdict.judge_op). A child that raises, crashes or runs past the timeout is that op's
"failed" row with the reason, never a hang and never the end of the other ops.

Most of a child's time is `import torch` (2-3 s here, against a fraction of a second of measuring),
so several ops are probed by children spawned together (at most PARALLEL_IMPORTS, and no more than
the CPUs): they import side by side, each says when it is done, and each gets its job in turn once
none of the others is still importing, so every op is measured in a fresh process that its siblings
leave alone (they wait on a pipe meanwhile).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Sequence

from .. import _native, opspec
from ..errors import InputError, ReportError
from ..report.op_probe import OpProbeReport, OpResult
from ..report.trace import warm_left_ms
from ..system.fileio import temp_folder
from ..system.launch import python_argv
from ..system.platform import cuda_index, fingerprint
from ..system.progress import progress_printer
from .aten_table import call_for, split_names
from .aten_verdict import OpTiming, VariantTiming, judge_op

CHILD = "warmprof.probes.aten_child"
READY_FD_ENV = "WARMPROF_PROBE_READY_FD"  # aten_child's: the pipe it writes to once imported
PARALLEL_IMPORTS = 4  # children importing torch at once, at most (and at most the CPUs)
READY_WAIT_S = 60.0  # how long a child's turn waits for a sibling still importing (then it goes anyway)
STEADY_CALLS = 20
VARIANT_CALLS = 10
RERUN_ROUNDS = 3


def probe_ops(calls: Any, *, device: str = "cpu", threads: int | None = None, progress: Any = False,
              timeout_s: float = 120, dtype: str = "float32") -> OpProbeReport:
    """Probe aten op calls, each in a fresh process: op-cold first call, steady, new shapes of the
    warm op, seen-shape re-run; a verdict per op. calls: opspec call specs (dicts) and/or op names
    with an optional main-input shape ('layer_norm', 'conv2d:8x3x64x64', 'aten.gelu.default'; a string
    may hold several, comma or space separated). threads: torch.set_num_threads in each child."""
    specs = [(c, None) for c in _specs(calls, dtype)]
    return _probe(specs, device=device, threads=threads, progress=progress, timeout_s=timeout_s, origin=None)


def probe_from(report_or_path: Any, *, top: int = 5, device: str | None = None, threads: int | None = None,
               progress: Any = False, timeout_s: float = 120, one_per_op: bool = False) -> OpProbeReport:
    """Probe the `top` distinct op calls of a trace report's unattributed_where op rows (largest ms
    first). report_or_path: a trace Report or the path of its JSON. device: the trace's by default;
    threads: the trace's protocol.run.threads by default. one_per_op: only each op's largest row
    (`trace --explain`: its verdict speaks for the op's other sites)."""
    from ..report.trace import Report

    _check_int("top", top, 1, 1000)
    report, origin = _trace_report(report_or_path)
    sites = op_sites(report, top, origin, one_per_op)
    if threads is None and report.protocol is not None:
        threads = report.protocol.run.threads
    return _probe(sites, device=device or report.device, threads=threads, progress=progress, timeout_s=timeout_s,
                  origin=origin if not isinstance(report_or_path, Report) else f"trace report of {report.model}")


def op_sites(report: Any, top: int, origin: str = "the report",
             one_per_op: bool = False) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(call spec, {"module", "ms", "calls"}) of the `top` largest distinct replayable op rows (one_per_op:
    of distinct ops)."""
    rows = [w for w in report.unattributed_where if isinstance(w, dict) and w.get("op")]
    if not rows:
        raise InputError(f"{origin} has no op rows in unattributed_where (no op held unexplained time above the "
                         "floor, or the trace ran without the op view: `warmprof trace --explain` or `--op-view` "
                         "records the model's own op calls)")
    out: list[tuple[dict[str, Any], dict[str, Any]]]
    out, seen, why = [], set(), []
    # largest first by what the warm processes of --explain left of a row (all of it, without them)
    for w in sorted(rows, key=lambda w: -warm_left_ms(w)):
        call = w.get("call")
        reason = "no call recorded" if not isinstance(call, dict) or not isinstance(call.get("op"), str) \
            else opspec.replayable(call) or _allocation(call)
        if reason:
            why.append(f"{w['op']}: {reason}")
            continue
        assert isinstance(call, dict)  # else reason said "no call recorded"
        key = call["op"] if one_per_op else json.dumps(call, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append((call, {"module": str(w.get("module", "")), "ms": float(w.get("ms", 0.0)), "calls": w.get("calls")}))
        if len(out) >= top:
            break
    if not out:
        raise InputError(f"{origin}: none of its {len(rows)} op rows can be replayed ({'; '.join(why[:3])})")
    return out


def _probe(sites: Sequence[tuple[dict[str, Any], dict[str, Any] | None]], *, device: str, threads: int | None,
           progress: Any, timeout_s: float, origin: str | None) -> OpProbeReport:
    if threads is not None:
        _check_int("threads", threads, 1, 4096)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 1 <= timeout_s <= 86400:
        raise InputError(f"timeout_s must be a number of seconds from 1 to 86400, got {timeout_s!r}")
    device = _check_device(device)
    say = progress_printer(progress, "warmprof probe")
    start_ns = _native.now_ns()
    results = []
    batch = max(1, min(PARALLEL_IMPORTS, os.cpu_count() or 1))
    spawned: list[_Child] = []
    try:
        for i, (call, source) in enumerate(sites, 1):
            if not spawned:  # the next batch, importing side by side while nothing is measured
                spawned = [_Child(threads) for _ in range(min(batch, len(sites) - i + 1))]
            child = spawned[0]
            for sibling in spawned[1:]:  # none of them still importing while this one measures
                sibling.wait_ready(READY_WAIT_S)
            say(f"[{i}/{len(sites)}] {opspec.short_op(call['op'])} {opspec.label(call)}: in a fresh process")
            try:
                result = probe_one(call, device=device, threads=threads, timeout_s=timeout_s,
                                   run=lambda job, _threads, timeout, c=child: c.run(job, timeout))
            finally:
                spawned.pop(0).close()
            result.source = source
            say(f"[{i}/{len(sites)}] {result.short}: {result.verdict}" + (f" ({result.error})" if result.error else ""))
            results.append(result)
    finally:
        for c in spawned:
            c.close()
    threads_used = next((r.threads for r in results if r.threads), None)
    return OpProbeReport(
        device=device, ops=results, platform=fingerprint(gpu_index=cuda_index(device)),
        protocol={"threads": threads or threads_used, "threads_requested": threads, "steady_calls": STEADY_CALLS,
                  "variant_calls": VARIANT_CALLS, "rerun_rounds": RERUN_ROUNDS, "timeout_s": timeout_s, "from": origin,
                  "child": f"python -m {CHILD}: one fresh process per op call",
                  "timer": "native CLOCK_MONOTONIC (warmprof._native.now_ns)"},
        wall_s=(_native.now_ns() - start_ns) / 1e9, warmprof_version=_native.__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def _allocation(call: dict[str, Any]) -> str:
    try:
        return opspec.allocation(call)
    except InputError as e:  # an op this torch does not have
        return str(e)


def too_large_variants(call: dict[str, Any]) -> list[str]:
    """The new shapes the child would try (aten_child.new_shapes) whose replay would go past the cap
    (opspec.allocation): the child skips them, with the reason."""
    from .aten_child import MAX_PERTURBATIONS
    from .aten_variants import new_sizes, perturbations, variant

    out = []
    for i, (what, targets, size) in enumerate(perturbations(call)):
        if i >= MAX_PERTURBATIONS:
            break
        for n in new_sizes(size):
            vspec = variant(call, targets, n)
            if opspec.replayable(vspec) or _allocation(vspec):
                out.append(f"{what} -> {n}")
    return out


def probe_one(call: dict[str, Any], *, device: str = "cpu", threads: int | None = None, timeout_s: float = 120,
              run: Callable[..., tuple[dict[str, Any], float]] | None = None) -> OpResult:
    """One op call in one fresh child, judged. `run` (job, threads, timeout_s) -> (answer, wall ms) is
    the child runner (a test double may stand in)."""
    job = {"call": call, "device": device, "threads": threads, "steady_calls": STEADY_CALLS,
           "variant_calls": VARIANT_CALLS, "rerun_rounds": RERUN_ROUNDS, "too_large": too_large_variants(call)}
    answer, wall_ms = (run or run_child)(job, threads, timeout_s)
    base = dict(op=call["op"], short=opspec.short_op(call["op"]), label=opspec.label(call), call=dict(call),
                child_wall_ms=wall_ms)
    if not answer.get("ok"):
        return OpResult(**base, verdict="failed", evidence="", error=str(answer.get("error") or "no reason given"))
    return result_of(answer, base, device)


def result_of(a: dict[str, Any], base: dict[str, Any], device: str) -> OpResult:
    """The OpResult for a child's answer (see aten_child.measure for its fields)."""
    s = a["steady"]
    variants = [VariantTiming(v["first_ms"], v["steady_ms"], v["steady_p10_ms"], v["steady_p90_ms"]) for v in a["variants"]]
    t = OpTiming(a["first_ms"], s["steady_ms"], s["steady_p10_ms"], s["steady_p90_ms"], a["rerun_ms"],
                 a["launch_hi_ms"], a["alloc_hi_ms"], variants, a.get("shape_alloc_hi_ms"))
    verdict, evidence = judge_op(t, base["op"], device.partition(":")[0], library=a.get("library"))
    return OpResult(
        **base, verdict=verdict, evidence=evidence, first_ms=t.first_ms, steady_ms=t.steady_ms,
        steady_p10_ms=t.steady_p10_ms, steady_p90_ms=t.steady_p90_ms, cold_excess_ms=t.cold_excess_ms,
        shape_excess_ms=t.shape_excess_ms, rerun_ms=t.rerun_ms, runtime_warmup_ms=a["runtime_warmup_ms"],
        launch_hi_ms=t.launch_hi_ms, alloc_hi_ms=t.alloc_hi_ms, working_set_bytes=int(a["working_set_bytes"]),
        shape_alloc_hi_ms=t.shape_alloc_hi_ms,
        variants=[{k: v[k] for k in ("what", "label", "first_ms", "steady_ms", "steady_p10_ms", "steady_p90_ms",
                                     "first_call") if k in v}
                  for v in a["variants"]],
        dropped_variants=list(a.get("dropped_variants", [])), threads=a.get("threads"), first_call=a.get("first_call"),
    )


def _child_env(tmp: str, threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    # A cold device: the driver's PTX JIT cache and torch's NVRTC kernel cache start empty.
    env["CUDA_CACHE_PATH"] = os.path.join(tmp, "cuda_cache")
    env["PYTORCH_KERNEL_CACHE_PATH"] = os.path.join(tmp, "torch_kernels")
    # the child imports this very warmprof, even when it is importable here only through sys.path
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding warmprof/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(here), env.get("PYTHONPATH", "")) if p)
    if threads is not None:  # the pools OpenMP and MKL start with, before torch.set_num_threads
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env.pop(READY_FD_ENV, None)
    return env


def run_child(job: dict[str, Any], threads: int | None, timeout_s: float) -> tuple[dict[str, Any], float]:
    """(the child's answer, its wall ms). A crash, a timeout or an unreadable answer is {"ok": False, "error"}."""
    child = _Child(threads)
    try:
        return child.run(job, timeout_s)
    finally:
        child.close()


class _Child:
    """One fresh probe child, started now: it imports torch, writes a byte on a pipe of its own, then
    waits for its job on stdin (aten_child). Its timeout counts its own work (the import and the
    measuring), not the time it waited for its turn."""

    def __init__(self, threads: int | None) -> None:
        self._tmp = temp_folder("warmprof-op-", "the op's fresh process")
        env = _child_env(self._tmp.name, threads)
        read_end, write_end = os.pipe()
        env[READY_FD_ENV] = str(write_end)
        self._t0 = _native.now_ns()
        self._ready_ns: int | None = None
        self._ready_fd: int | None = read_end
        try:
            self.proc = subprocess.Popen(python_argv(CHILD), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, cwd=self._tmp.name, pass_fds=(write_end,))
        except BaseException:
            os.close(read_end)
            self._ready_fd = None
            self._tmp.cleanup()
            raise
        finally:
            os.close(write_end)

    def wait_ready(self, timeout_s: float) -> None:
        """Until the child has imported (or exited, or timeout_s passed: a child that never says so
        only costs its siblings that wait)."""
        import select

        if self._ready_fd is None:
            return
        readable, _, _ = select.select([self._ready_fd], [], [], max(0.0, timeout_s))
        if readable:
            try:
                os.read(self._ready_fd, 1)  # a byte: imported; b"": exited before saying so
            except OSError:
                pass
            self._ready_ns = _native.now_ns()
            os.close(self._ready_fd)
            self._ready_fd = None

    def run(self, job: dict[str, Any], timeout_s: float) -> tuple[dict[str, Any], float]:
        """Send the job and wait for the answer: (answer, the child's own wall ms)."""
        self.wait_ready(0.0)
        imported_ms = ((self._ready_ns or _native.now_ns()) - self._t0) / 1e6 if self._ready_ns else 0.0
        t_job = _native.now_ns()
        try:
            out, err = self.proc.communicate(json.dumps(job).encode(), timeout=max(1e-3, timeout_s - imported_ms / 1e3))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return {"ok": False, "error": f"timed out after {timeout_s:g} s (the child was killed)"}, timeout_s * 1e3
        except BrokenPipeError:  # it exited before reading its job
            out, err = self.proc.communicate()
        wall_ms = imported_ms + (_native.now_ns() - t_job) / 1e6
        return _answer(self.proc.returncode, out or b"", err or b""), wall_ms

    def close(self) -> None:
        """Stop the child if it is still running; remove its folder."""
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.communicate(timeout=5)
            except (subprocess.TimeoutExpired, ValueError, OSError):
                pass
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None
        self._tmp.cleanup()


def _answer(rc: int, stdout: bytes, stderr: bytes) -> dict[str, Any]:
    lines = [ln for ln in stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    if rc == 0 and lines:
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            answer = None
        if isinstance(answer, dict) and "ok" in answer:
            return answer
    last = next((ln.strip() for ln in reversed(stderr.decode("utf-8", "replace").splitlines()) if ln.strip()), "")
    if rc < 0:
        how = f"the child was killed by {_signal_name(-rc)}"
    elif rc != 0:
        how = f"the child exited with code {rc}"
    else:
        how = "the child gave no answer"
    return {"ok": False, "error": how + (f": {last[:300]}" if last else "")}


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _specs(calls: Any, dtype: str) -> list[dict[str, Any]]:
    if isinstance(calls, dict):
        calls = [calls]
    if isinstance(calls, str):
        calls = [calls]
    try:
        items = list(calls)
    except TypeError:
        raise InputError(f"calls must be op call specs or op names, got {calls!r}") from None
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, dict):
            out.append(_checked_spec(item))
        else:
            out += [_checked_spec(call_for(name, dtype)) for name in split_names([item])]  # sizes checked here, not in a child
    if not out:
        raise InputError("no ops to probe: give op names (layer_norm, conv2d:8x3x64x64) or op call specs")
    return out


def _checked_spec(spec: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(spec.get("op"), str):
        raise InputError(f"an op call spec needs an 'op' name (aten.addmm.default), got {spec!r:.200}")
    opspec.resolve_op(spec["op"])
    why = opspec.replayable(spec) or opspec.allocation(spec)
    if why:
        raise InputError(f"cannot replay {spec['op']}: {why}")
    return json.loads(json.dumps(spec))  # a plain JSON copy: the child gets, and the report keeps, exactly this


def _trace_report(report_or_path: Any) -> tuple[Any, str]:
    from ..report.base import load
    from ..report.trace import Report

    if isinstance(report_or_path, Report):
        return report_or_path, "the trace report"
    if not isinstance(report_or_path, (str, os.PathLike)):
        raise InputError(f"probe_from needs a trace Report or the path of its JSON, got {type(report_or_path).__name__}")
    origin = os.fspath(report_or_path)
    report = load(report_or_path)  # ReportError: missing, unreadable, corrupt
    if not isinstance(report, Report):
        raise ReportError(f"{origin}: not a trace report (it is a {report.KIND!r} report); probe --from takes the JSON "
                          "of `warmprof trace --explain --json R.json`")
    return report, origin


def _check_device(device: Any) -> str:
    from .. import devices
    from ..errors import DeviceError

    if not isinstance(device, str) or devices.find(device) is None:
        raise DeviceError(f"unknown device {device!r}: use {devices.USE}")
    kind, _, index = device.partition(":")
    if index and not index.isdigit():
        raise DeviceError(f"unknown device {device!r}: use {devices.USE}")
    return f"{kind}:{int(index)}" if index else kind


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(f"{name} must be an integer from {lo} to {hi}, got {value!r}")


__all__ = ["op_sites", "probe_from", "probe_one", "probe_ops", "run_child"]
