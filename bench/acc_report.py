"""bench/accuracy.py's reading of one warmprof trace report (either schema; see accuracy.py's docstring).

read_report(r) gives the figures the harness tabulates. Beside issue 24's figures (own cost, model excess,
booked, explained share), issue 39's, with the waits for a CPU out:

- own_waits_out_ms: the model's own causes (causes other than profiler_overhead and unattributed) with
  cpu_contention left out and each remaining cause's waited_ms (its wait for a CPU inside its own spans,
  schedstat; absent from the JSON where 0) taken off. Its wait/disk_read causes and blocked_ms (time off the
  CPU) stay in: the bare child's net excess keeps the time off the CPU too.
- headline_net_ms: the headline excess (excess_ms: the clean control's first pass less its steady median in
  the new schema) less the clean first pass's wait for a CPU beyond its steady passes' median
  (accounting.run_to_run.clean_waited_for_cpu_ms, else clean.first/steady run_delay_ms): the same waits the
  report's verdict and accounting leave out. None where the report has no clean control.
- planted_booked(r, module, cause): what the report books for `cause` in exactly that module (its per-module
  rows, each cause in its innermost module) and its unattributed time there.
"""

from __future__ import annotations

import json
import re

OWN_CAUSES = {"profiler_overhead"}
NOT_MODEL = OWN_CAUSES | {"unattributed"}
# Booked for the model all the same (the brief's definition), but about the machine: shown apart, since on a
# busy machine they can carry a pre-run model's whole "first-call cost".
MACHINE_CAUSES = {"cpu_contention", "wait"}
CONTENTION = "cpu_contention"
NO_COST_RE = re.compile(r"\bno\b[^.;]*\b(first[- ]?(call|pass|request)|cold|warm[- ]?up|excess)\b[^.;]*\bcost|"
                        r"\bno\b[^.;]*\bfirst[- ]?(call|pass)\b|\bnothing to (explain|attribute)\b|\balready warm\b",
                        re.I)



# ---------------------------------------------------------------- reading a report, either schema

def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def verdict_text(v) -> str | None:
    if v is None or v == "":
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        for key in ("text", "summary", "says", "verdict", "message", "kind"):
            if isinstance(v.get(key), str):
                return v[key] if key != "kind" else json.dumps(v, sort_keys=True)
        return json.dumps(v, sort_keys=True)
    return json.dumps(v)


# The verdict codes the new schema writes (traces/verdict.py): a first pass faster than steady is no
# first-call cost either.
VERDICT_CODES = {"first_call_cost": False, "no_first_call_cost": True, "first_pass_faster": True}


def verdict_no_cost(v) -> bool | None:
    """Does the verdict say there is no first-call cost? None when there is no verdict to read."""
    if v is None or v == "":
        return None
    if isinstance(v, str) and v.strip() in VERDICT_CODES:
        return VERDICT_CODES[v.strip()]
    if isinstance(v, dict):
        for key in ("no_first_call_cost", "no_cost", "warm", "nothing_to_explain"):
            if isinstance(v.get(key), bool):
                return v[key]
        for key in ("code", "kind", "id", "name", "verdict"):
            if isinstance(v.get(key), str) and v[key].strip() in VERDICT_CODES:
                return VERDICT_CODES[v[key].strip()]
    text = (verdict_text(v) or "").replace("_", " ")
    return bool(NO_COST_RE.search(text))


def read_report(r: dict) -> dict:
    causes = [c for c in (r.get("causes") or []) if isinstance(c, dict)]
    by: dict[str, float] = {}
    for c in causes:
        ms = _num(c.get("ms"))
        if ms is not None:
            by[str(c.get("cause"))] = by.get(str(c.get("cause")), 0.0) + ms
    own_rows = sum(v for k, v in by.items() if k in OWN_CAUSES)
    clean = r.get("clean") if isinstance(r.get("clean"), dict) else None
    own_cost = r.get("own_cost") if isinstance(r.get("own_cost"), dict) else None
    excess = _num(r.get("excess_ms"))
    if excess is None and clean is not None:
        excess = _num(clean.get("excess_ms"))
    schema = "new" if (clean is not None or own_cost is not None or "unattributed" in by) else "old"
    model_excess = excess - own_rows if excess is not None else None
    booked = sum(v for k, v in by.items() if k not in NOT_MODEL)
    machine = sum(v for k, v in by.items() if k in MACHINE_CAUSES)
    unattributed = by.get("unattributed", _num(r.get("unattributed_ms")))
    share = booked / model_excess if model_excess is not None and model_excess > 0 else None
    # issue 38's accounting: excess = causes + run_to_run + unattributed; the causes' share of what the process
    # whose causes were measured paid (its instrumented excess less warmprof's own cost: causes + unattributed)
    acc = r.get("accounting") if isinstance(r.get("accounting"), dict) else {}
    run_to_run = _num(acc.get("run_to_run_ms"))
    # its own causes are instrumented - unattributed: where the control ran, the table's cpu_contention is the
    # clean pass's (8283fb6), so booked + unattributed is not that figure
    rr = acc.get("run_to_run") if isinstance(acc.get("run_to_run"), dict) else {}
    instrumented = _num(rr.get("instrumented_excess_less_own_ms"))
    if instrumented is None:
        instrumented = booked + unattributed if unattributed is not None else None
    own_causes = instrumented - unattributed if instrumented is not None and unattributed is not None else booked
    share_instrumented = own_causes / instrumented if instrumented is not None and instrumented > 0 else None
    # warmprof's own cost on the first pass: the new schema's own_cost.first_pass_ms (measured on the model
    # warm), else the profiler_overhead rows (old schema: an estimate from warm instrumented passes).
    own_ms = own_rows
    if own_cost is not None and _num(own_cost.get("first_pass_ms")) is not None:
        own_ms = _num(own_cost["first_pass_ms"])
    # issue 39: the model's own causes with the waits for a CPU out (cpu_contention left out, each other cause's
    # waited_ms taken off), and the headline excess less the clean first pass's own wait for a CPU
    own_waits_out = sum(max(0.0, (_num(c.get("ms")) or 0.0) - (_num(c.get("waited_ms")) or 0.0)) for c in causes
                        if str(c.get("cause")) not in NOT_MODEL and c.get("cause") != CONTENTION)
    waited_in_causes = sum(_num(c.get("waited_ms")) or 0.0 for c in causes
                           if str(c.get("cause")) not in NOT_MODEL and c.get("cause") != CONTENTION)
    clean_wait = clean_waited_for_cpu_ms(r)
    headline_net = excess - clean_wait if excess is not None and clean_wait is not None else None
    verdict = r.get("verdict")
    top = sorted(((k, v) for k, v in by.items() if k not in OWN_CAUSES), key=lambda kv: -kv[1])[:5]
    return {
        "schema": schema,
        "first_pass_ms": _num(r.get("first_pass_ms")),
        "steady_ms": _num(r.get("steady_median_ms")) or _num(r.get("steady_ms")),
        "excess_ms": excess,
        "own_ms": own_ms,
        "own_rows_ms": own_rows,
        "model_excess_ms": model_excess,
        "booked_ms": booked,
        "machine_ms": machine,
        "booked_less_machine_ms": booked - machine,
        "unattributed_ms": unattributed,
        "share": share,
        "run_to_run_ms": run_to_run,
        "share_instrumented": share_instrumented,
        "clean": clean,
        "own_cost": own_cost,
        "verdict": verdict_text(verdict),
        "verdict_no_cost": verdict_no_cost(verdict),
        "top_causes": top,
        "contention_ms": by.get(CONTENTION, 0.0),
        "waited_in_causes_ms": waited_in_causes,
        "own_waits_out_ms": own_waits_out,
        "clean_waited_for_cpu_ms": clean_wait,
        "headline_net_ms": headline_net,
        # issue 39: each cause's ms (the default against --explain, cause by cause) and the once-per-process row
        # (source warm_process: runtime_init the clean first pass paid beyond its other-shape passes)
        "by_cause": {k: v for k, v in by.items() if k not in NOT_MODEL},
        "once_ms": sum(_num(c.get("ms")) or 0.0 for c in causes if c.get("source") == "warm_process"),
    }


def clean_waited_for_cpu_ms(r: dict) -> float | None:
    """The clean control's first pass's wait for a CPU beyond its steady passes' median (ms; may be below
    zero), as the report's accounting has it; None where the report has no clean control's waits."""
    acc = r.get("accounting") if isinstance(r.get("accounting"), dict) else {}
    rr = acc.get("run_to_run") if isinstance(acc.get("run_to_run"), dict) else {}
    if _num(rr.get("clean_waited_for_cpu_ms")) is not None:
        return _num(rr["clean_waited_for_cpu_ms"])
    clean = r.get("clean") if isinstance(r.get("clean"), dict) else {}
    first, steady = clean.get("first"), clean.get("steady")
    if isinstance(first, dict) and _num(first.get("run_delay_ms")) is not None:
        base = _num(steady.get("run_delay_ms")) if isinstance(steady, dict) else None
        return _num(first["run_delay_ms"]) - (base or 0.0)
    return None


def planted_booked(r: dict, module: str, cause: str) -> dict:
    """What the report books for `cause` in exactly `module` (its per-module rows: each cause in its innermost
    module, scaled to the cause table), the same cause in the module's submodules, and the unattributed time
    the report places in the module itself (unattributed_where)."""
    mods = [m for m in (r.get("modules") or []) if isinstance(m, dict)]
    here = sum(_num((m.get("causes") or {}).get(cause)) or 0.0 for m in mods if m.get("module") == module)
    below = sum(_num((m.get("causes") or {}).get(cause)) or 0.0 for m in mods
                if str(m.get("module", "")).startswith(module + "."))
    other = sum(_num(v) or 0.0 for m in mods if m.get("module") == module
                for k, v in (m.get("causes") or {}).items() if k != cause)
    unattr = sum(_num(u.get("ms")) or 0.0 for u in (r.get("unattributed_where") or [])
                 if isinstance(u, dict) and u.get("module") == module)
    return {"module": module, "cause": cause, "booked_ms": here, "in_submodules_ms": below,
            "other_causes_ms": other, "unattributed_ms": unattr}
