"""The run report from what the processes recorded: the tree, each process attributed (assemble.py), the
engine's own figures checked against warmprof's, ready and the first response, and the path to each."""

from __future__ import annotations

import datetime
import os
from typing import Any

from . import assemble as M
from . import engines, requests
from .launch import Options, Outcome

PATH_STEP_NS = 5_000_000  # the path is followed in 5 ms steps (its processes' clocks are sampled every 20 ms)


def role_of(meta: dict[str, Any], is_root: bool) -> str:
    """A process's role: an engine's name for it (its title: vLLM's setproctitle), else multiprocessing's
    name for it, else its script or module."""
    named = engines.role(meta)
    if named:
        return named
    mp = meta.get("mp_name") or ""
    if mp and mp != "MainProcess":
        return mp
    argv = meta.get("argv") or []
    script = next((a for a in argv[1:] if not a.startswith("-")), "")
    if "-m" in argv:
        i = argv.index("-m")
        script = argv[i + 1] if i + 1 < len(argv) else script
    if "-c" in argv:
        script = "python -c"
    label = os.path.basename(script) if script else os.path.basename(argv[0]) if argv else "?"
    return ("main: " if is_root else "") + label


def build_report(out: Outcome, opts: Options, calibration: Any, calibration_dict: dict[str, Any]) -> Any:
    from .. import __version__
    from ..report.run import RunReport
    from ..system.platform import fingerprint

    records, problems = M.read_records(out.out_dir)
    notes = list(problems)
    if opts.onednn_off and opts.onednn:
        notes.append(f"oneDNN's primitive creations were not timed: {opts.onednn_off}")
    M.check_records(records)
    pids = {r.pid for r in records}
    tree = M.Tree()
    processes = []
    engine_checks: list[dict[str, Any]] = []
    engine_name = ""
    for r in sorted(records, key=lambda r: r.meta.get("t_start_ns") or r.meta["t_agent_ns"]):
        m = r.meta
        parent = m.get("forked_from") or m.get("ppid")
        parent = parent if parent in pids else None
        eng_phases, checks = engines.phases(m)
        if m.get("engine"):
            engine_name = m["engine"]
        attributed = M.attribute_process(r, eng_phases, calibration, out.origin_ns)
        entry: dict[str, Any] = {
            "pid": r.pid, "ppid": int(m.get("ppid") or 0), "parent": parent, "role": role_of(m, parent is None),
            "title": m.get("title", ""), "argv": [str(a) for a in m.get("argv", [])], "end": str(m.get("end", "")),
            "start_ms": attributed["start_ms"], "end_ms": attributed["end_ms"], "phases": attributed["phases"],
            "own_ms": attributed["own_ms"], "calls": M.first_calls(r, calibration, out.origin_ns),
            "samples_ms": float(m.get("sample_ms", 0.0)), "dropped": int(m.get("dropped", 0)),
        }
        if m.get("cupti"):  # CUDA started in this process: CUPTI's state (on, or off and why)
            entry["cupti"] = dict(m["cupti"])
        dnnl = m.get("onednn") or {}
        if dnnl.get("creations") or dnnl.get("on") is False:  # oneDNN made primitives here, or its tap could not go on
            entry["onednn"] = dict(dnnl)
        if checks:
            entry["engine"] = {"name": m.get("engine", ""), "checks": checks}
            engine_checks += [{**c, "pid": r.pid} for c in checks]
        if entry["dropped"]:
            notes.append(f"pid {r.pid}: {entry['dropped']} records lost (a recorder buffer was full): its phases' "
                         "causes are short of them")
        processes.append(entry)
        tree.procs[r.pid] = entry
        tree.busy[r.pid] = M.busy_series(r)
        if parent is not None:
            tree.children.setdefault(parent, []).append(r.pid)
    unrecorded = [{"pid": pid, "ppid": s["ppid"], "name": s["name"], "first_seen_ms": s["first_seen_ms"]}
                  for pid, s in sorted(out.seen.items()) if pid not in pids]
    if unrecorded:
        notes.append(f"{len(unrecorded)} process(es) of the tree left no record (not Python, Python without warmprof "
                     "or run with -E/-I, or killed with SIGKILL): " +
                     ", ".join(f"{u['name']} (pid {u['pid']})" for u in unrecorded[:6]))
    if not processes:
        notes.append("no Python process of the command's tree was recorded: the command is not Python, or its "
                     "Python has no warmprof installed (the hook imports it) or runs with -E or -I (which ignore "
                     "PYTHONPATH), or every process was killed before it wrote a record")
    root = next((p for p in processes if p["parent"] is None and p["pid"] == _root_pid(out, processes)), None) \
        or (processes[0] if processes else None)
    ready = _ready(records, opts, out.origin_ns)
    first = _first_response(records, out.origin_ns)
    to_ready = to_first = None
    if root is not None:
        for mark, key in ((ready, "ready"), (first, "first")):
            if mark is None:
                continue
            steps = M.critical_path(tree, root["pid"], out.origin_ns, out.origin_ns + int(mark["ms"] * 1e6), PATH_STEP_NS)
            split = M.path_split(tree, steps)
            path = {"ms": mark["ms"], **split, "by_process": {}}
            for row in split["by_phase"]:
                path["by_process"][str(row["pid"])] = path["by_process"].get(str(row["pid"]), 0.0) + row["ms"]
            if key == "ready":
                to_ready = path
            else:
                to_first = path
    first_request = (requests.first_request(records, tree.procs, tree.children, first["pid"], first["by"],
                                            own_spans={r.pid: M.own_spans(r) for r in records})
                     if first is not None else None)
    if first is not None and first_request is None:
        notes.append(f"the first {first['by']} is not split across the tree: no later one of its key (inside every "
                     "process's record) to compare it with")
    return RunReport(
        command=list(out.argv), first_request=first_request, duration_ms=(out.end_ns - out.origin_ns) / 1e6, processes=processes,
        returncode=out.returncode, ended_by=out.ended_by, unrecorded=unrecorded, ready=ready, first_response=first,
        to_ready=to_ready, to_first_response=to_first,
        engine={"name": engine_name, "checks": engine_checks} if engine_name else {},
        calibration=calibration_dict, notes=notes, stopped=list(out.stopped), platform=fingerprint(),
        warmprof_version=__version__, created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def _root_pid(out: Outcome, processes: list[dict[str, Any]]) -> int | None:
    roots = [p for p in processes if p["parent"] is None]
    if not roots:
        return None
    return min(roots, key=lambda p: p["start_ms"])["pid"]


def _ready(records: list[M.ProcRecord], opts: Options, origin: int) -> dict[str, Any] | None:
    """When the cold start ended: an engine's or --ready-after's mark, else the first watched call's start."""
    marks = [(mk["t_ns"], mk.get("by", "engine"), r.pid, mk.get("text", "")) for r in records
             for mk in r.meta.get("marks", []) if mk.get("kind") == "ready"]
    if marks:
        t, by, pid, text = min(marks)
        return {"ms": (t - origin) / 1e6, "by": by, "pid": pid, "text": text}
    calls = [(c["start_ns"], r.pid, c["label"]) for r in records for c in r.meta.get("calls", [])]
    if calls and opts.ready_after in ("", "first-call"):
        t, pid, label = min(calls)
        return {"ms": (t - origin) / 1e6, "by": "first-call", "pid": pid, "text": f"the first {label} call started"}
    return None


def _first_response(records: list[M.ProcRecord], origin: int) -> dict[str, Any] | None:
    """The end of the first request (an engine's request calls), else of the first watched call."""
    requests = [(c["end_ns"], r.pid, c["label"]) for r in records for c in r.meta.get("calls", [])
                if c["label"] in engines.REQUEST_LABELS]
    calls = requests or [(c["end_ns"], r.pid, c["label"]) for r in records for c in r.meta.get("calls", [])]
    if not calls:
        return None
    t, pid, label = min(calls)
    return {"ms": (t - origin) / 1e6, "by": label, "pid": pid}
