"""Accuracy harness (issue 24's acceptance): warmprof's answer against ground truth measured WITHOUT warmprof.

For each model of bench/zoo.py (transformers, torchvision and diffusers models at small configs, built in code,
plus warmprof's own demo; --models takes zoo.GROUPS' names too: families = issue 39's seven), --runs fresh
processes of each kind, in sequence (never in parallel: they would disturb each other's timing),
run-interleaved so drift spreads over all kinds:

  bare         bench/acc_child.py bare NAME: no profiler; the first forward timed with perf_counter_ns,
               then 30 steady passes; excess = first - steady median (the ground truth); each pass's wait for
               a CPU read around it too
  trace        warmprof trace bench/zoo.py:NAME --shape S (or --inputs bench/zoo.py:NAME_inputs)
               --threads 1 --quiet --json OUT
  explain      the same with --explain (unless --no-explain)
  prerun       warmprof trace of NAME_prerun (the model already run 20 times at the traced inputs inside its
               factory: its true first-pass excess is ~0); and prerun-bare, the bare child of the same
               factory, to show that ground truth
  planted      for a model whose ZOO entry has "planted" (zoo.unet_planted), bench/acc_child.py planted: the
               planted cost alone (a fresh 64 MiB float32 tensor, every page written) in a fresh process
               without warmprof, against the allocator_growth each trace books in the planted block

Then the time-to-an-answer check: the wall time of `warmprof trace --demo --threads 1 --quiet` against a
plain fresh process that builds the demo and runs 11 passes (acc_child.py plain-demo), medians of
--runs.

Every report is read defensively, for both schemas:
- old (today): excess_ms includes warmprof's own cost, booked as the causes row(s) "profiler_overhead";
- new (being added): excess_ms is the model's own excess (measured clean in a fresh process when `clean`
  = {first_pass_ms, steady_ms, excess_ms, ...} is present), `own_cost` holds warmprof's own cost, `causes`
  holds the model's causes plus "unattributed" and no "profiler_overhead" row; an optional `verdict`.
own = the profiler_overhead rows (0 in the new schema); model excess = excess_ms - own; booked for the
model = causes other than profiler_overhead and unattributed; explained share = booked / model excess.
explained (instr.) = booked / (booked + unattributed): the causes' share of what the instrumented process paid
(its excess less warmprof's own cost); run-to-run = the report's accounting.run_to_run_ms (issue 38: the clean
first pass's excess against the instrumented one's, its own row, never a cause).

With the waits for a CPU out on both sides (issue 39; bench/acc_report.py reads them):
bare exc, waits out = the bare child's (first - its wait) - median(steady - its wait), each pass's schedstat
run-queue delay read around it (acc_child.py); own share, waits out = (booked less cpu_contention, less each
remaining cause's waited_ms) / bare exc, waits out; headline/bare (waits out) = (the report's headline excess
less the clean control's first-pass wait for a CPU beyond its steady passes', accounting.run_to_run) / bare
exc, waits out. Ratios of medians over runs, as trace/bare; time off the CPU stays in on both sides.

Acceptance (printed as ok / FAIL per model):
  cold      trace model excess / bare excess (medians) within 0.67-1.5x
  prerun    the pre-run variant's booked-for-model / the bare cold excess <= 0.25x, and its verdict says no
            first-call cost (n/a while reports carry no verdict)
  explained explained share >= 80% by default, >= 90% with --explain (a goal)
  answer    trace --demo wall / plain demo process wall <= 3x

Usage (see bench/ACCURACY.md):
  python bench/accuracy.py --venv /work/venv-acc213 --models demo,llama,bert,t5
  python bench/accuracy.py --venv /work/venv-acc214 --models mobilenet,resnet18 --no-answer-time
  python bench/accuracy.py --venv /work/venv-acc213 --models families,unet_planted --no-answer-time
Progress on stderr; the tables on stdout; --json PATH saves every raw figure and report summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO_PATH = os.path.join(HERE, "zoo.py")
CHILD = os.path.join(HERE, "acc_child.py")
VENVS_SH = os.path.join(HERE, "acc_venvs.sh")

sys.path.insert(0, HERE)
from zoo import DEFAULT_MODELS, GROUPS, ZOO  # noqa: E402  (zoo imports torch only inside its factories)
from acc_report import _num, planted_booked, read_report  # noqa: E402,F401  (read_report: the reading, moved)

COLD_LO, COLD_HI = 0.67, 1.5
PRERUN_MAX = 0.25
GOAL_DEFAULT, GOAL_EXPLAIN = 0.80, 0.90
ANSWER_MAX = 3.0


def log(msg: str) -> None:
    print(f"[accuracy {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def wait_for_load(limit: float | None, max_wait_s: float) -> None:
    if limit is None:
        return
    t0 = time.monotonic()
    while (la := loadavg()) is not None and la > limit and time.monotonic() - t0 < max_wait_s:
        time.sleep(5)
    if la is not None and la > limit:
        log(f"load average still {la:.2f} > {limit} after {max_wait_s:.0f} s: running anyway")


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Child:
    """One fresh process: argv, wall time, rc, stdout, stderr tail."""

    def __init__(self, argv: list[str], timeout: float, cwd: str) -> None:
        self.argv = argv
        self.load_before = loadavg()
        t0 = time.perf_counter()
        try:
            # its own session, so a timeout ends the child's own children too (a trace runs fresh processes)
            p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self.rc, self.stdout, self.stderr = "oserror", "", str(e)
        else:
            try:
                self.stdout, self.stderr = p.communicate(timeout=timeout)
                self.rc = p.returncode
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.stdout, self.stderr = p.communicate()
                self.rc = "timeout"
                self.stderr += f"\n(killed after {timeout:.0f} s)"
        self.wall_s = time.perf_counter() - t0
        self.ok = self.rc == 0

    def failure(self, what: str) -> dict:
        log(f"FAILED {what} (rc {self.rc}): {' '.join(self.argv)}\n--- stderr tail ---\n{tail(self.stderr)}\n---")
        return {"ok": False, "rc": self.rc, "stderr_tail": tail(self.stderr), "wall_s": self.wall_s}


# ---------------------------------------------------------------- the children

def bare(py: str, factory: str, args, mode: str = "bare") -> dict:
    wait_for_load(args.wait_load, args.wait_max)
    c = Child([py, CHILD, mode, factory, str(args.steady)], args.timeout, HERE)
    if not c.ok:
        return c.failure(f"bare {factory}")
    try:
        out = json.loads(c.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return c.failure(f"bare {factory}: no JSON line on stdout")
    out.update(ok=True, wall_s=c.wall_s, load=c.load_before)
    return out


def trace(py: str, name: str, factory: str, explain: bool, args, workdir: str, tag: str) -> dict:
    wait_for_load(args.wait_load, args.wait_max)
    spec = ZOO[name]
    out = os.path.join(workdir, f"{tag}.json")
    argv = [py, "-m", "warmprof", "trace", f"{ZOO_PATH}:{factory}"]
    argv += ["--shape", spec["shape"]] if spec["shape"] else ["--inputs", f"{ZOO_PATH}:{name}_inputs"]
    argv += ["--threads", "1", "--quiet", "--json", out]
    if explain:
        argv.append("--explain")
    c = Child(argv, args.timeout, HERE)
    if not c.ok:
        return c.failure(f"trace {tag}")
    try:
        with open(out) as f:
            report = json.load(f)
        res = read_report(report)
    except (OSError, ValueError, TypeError, AttributeError) as e:
        c.stderr += f"\n(could not read the report {out}: {type(e).__name__}: {e})"
        return c.failure(f"trace {tag}: report")
    if spec.get("planted") and factory == name:  # the cost planted in one block: what the report books there
        res["planted"] = planted_booked(report, spec["planted"]["module"], spec["planted"]["cause"])
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy(out, os.path.join(args.keep, f"{tag}.json"))
    res.update(ok=True, wall_s=c.wall_s, load=c.load_before)
    return res


def planted(py: str, args) -> dict:
    """acc_child.py planted: zoo.plant_cost() (the planted 64 MiB first write) timed alone, no warmprof."""
    wait_for_load(args.wait_load, args.wait_max)
    c = Child([py, CHILD, "planted"], args.timeout, HERE)
    if not c.ok:
        return c.failure("planted")
    try:
        out = json.loads(c.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return c.failure("planted: no JSON line on stdout")
    out.update(ok=True, wall_s=c.wall_s, load=c.load_before)
    return out


def has_packages(py: str, needs: tuple[str, ...]) -> str | None:
    """None when `py` imports everything in needs, else the first it lacks."""
    for mod in needs:
        c = Child([py, "-c", f"import {mod}"], 120, HERE)
        if not c.ok:
            return mod
    return None


# ---------------------------------------------------------------- figures

def med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get("ok") and _num(r.get(key)) is not None]
    return statistics.median(vals) if vals else None


def rng(rows: list[dict], key: str) -> tuple[float, float] | None:
    vals = [r[key] for r in rows if r.get("ok") and _num(r.get(key)) is not None]
    return (min(vals), max(vals)) if vals else None


def n_ok(rows: list[dict]) -> int:
    return sum(1 for r in rows if r.get("ok"))


def fmt(x: float | None, spec: str = ".1f", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def summarise(name: str, runs: dict[str, list[dict]], n: int) -> dict:
    s: dict = {"model": name}
    b = runs.get("bare", [])
    s["bare_excess"] = med(b, "excess_ms")
    s["bare_range"] = rng(b, "excess_ms")
    s["bare_first"] = med(b, "first_ms")
    s["bare_steady"] = med(b, "steady_ms")
    s["bare_ok"] = n_ok(b)
    s["bare_net_excess"] = med(b, "net_excess_ms")  # net of the waits for a CPU, first and steady (acc_child.py)
    s["bare_net_range"] = rng(b, "net_excess_ms")
    for kind in ("trace", "explain", "prerun"):
        rows = runs.get(kind, [])
        s[f"{kind}_ok"] = n_ok(rows)
        s[f"{kind}_ran"] = len(rows)
        s[f"{kind}_model_excess"] = med(rows, "model_excess_ms")
        s[f"{kind}_range"] = rng(rows, "model_excess_ms")
        s[f"{kind}_booked"] = med(rows, "booked_ms")
        s[f"{kind}_machine"] = med(rows, "machine_ms")
        s[f"{kind}_own"] = med(rows, "own_ms")
        s[f"{kind}_share"] = med(rows, "share")
        s[f"{kind}_share_instr"] = med(rows, "share_instrumented")
        s[f"{kind}_run_to_run"] = med(rows, "run_to_run_ms")
        s[f"{kind}_own_waits_out"] = med(rows, "own_waits_out_ms")
        s[f"{kind}_headline_net"] = med(rows, "headline_net_ms")
        s[f"{kind}_wall"] = med(rows, "wall_s")
        s[f"{kind}_schema"] = sorted({r["schema"] for r in rows if r.get("ok")})
        verdicts = [r.get("verdict") for r in rows if r.get("ok")]
        s[f"{kind}_verdicts"] = verdicts
        flags = [r.get("verdict_no_cost") for r in rows if r.get("ok")]
        s[f"{kind}_no_cost"] = None if not flags or all(f is None for f in flags) else \
            sum(1 for f in flags if f) / len(flags)
    s["load"] = med([r for rows in runs.values() for r in rows], "load")
    s["prerun_bare_excess"] = med(runs.get("prerun_bare", []), "excess_ms")
    s["prerun_bare_range"] = rng(runs.get("prerun_bare", []), "excess_ms")
    be = s["bare_excess"]
    s["cold_ratio"] = s["trace_model_excess"] / be if be and be > 0 and s["trace_model_excess"] is not None else None
    s["prerun_ratio"] = s["prerun_booked"] / be if be and be > 0 and s["prerun_booked"] is not None else None
    bn = s["bare_net_excess"]  # issue 39: the waits for a CPU out on both sides (ratios of medians, as cold's)
    for kind in ("trace", "explain"):
        ow = s[f"{kind}_own_waits_out"]
        s[f"{kind}_share_waits_out"] = ow / bn if bn and bn > 0 and ow is not None else None
    hn = s["trace_headline_net"]
    s["headline_ratio_net"] = hn / bn if bn and bn > 0 and hn is not None else None
    if runs.get("planted"):
        s["planted"] = summarise_planted(runs)
    # the once-per-process ground truth: the bare excess less the bare excess after one pass at another shape,
    # against the report's warm_process row (medians), and in how many traces the row was booked at all
    bo = med(runs.get("bare_other", []), "excess_ms")
    s["once_bare"] = be - bo if be is not None and bo is not None else None
    s["once_booked"] = med(runs.get("trace", []), "once_ms")
    s["once_fired"] = sum(1 for r in runs.get("trace", []) if r.get("ok") and (r.get("once_ms") or 0) > 0)
    # cause by cause, the default against --explain (medians over runs; causes either books at 0.1 ms or more)
    per: dict[str, dict[str, float | None]] = {}
    for kind in ("trace", "explain"):
        rows = [r for r in runs.get(kind, []) if r.get("ok") and isinstance(r.get("by_cause"), dict)]
        for cause in {c for r in rows for c in r["by_cause"]}:
            per.setdefault(cause, {})[kind] = statistics.median(r["by_cause"].get(cause, 0.0) for r in rows)
    s["by_cause"] = {c: v for c, v in per.items() if max((x or 0.0) for x in v.values()) >= 0.1}
    pl = med(runs.get("prerun", []), "booked_less_machine_ms")
    s["prerun_ratio_less_machine"] = pl / be if be and be > 0 and pl is not None else None
    return s


def summarise_planted(runs: dict[str, list[dict]]) -> dict:
    """The planted cost alone (acc_child.py planted, fresh processes) against what the cold traces booked for
    it in its block (medians; ranges)."""
    p = runs["planted"]
    out = {"bare_ok": n_ok(p), "bare_ran": len(p), "bare_ms": med(p, "planted_net_ms"),
           "bare_range": rng(p, "planted_net_ms"), "bare_wait_ms": med(p, "wait_ms"),
           "bare_faults_ms": med(p, "faults_ms"), "bare_rewrite_ms": med(p, "rewrite_ms")}
    for kind in ("trace", "explain"):
        rows = [dict(r["planted"], ok=True) for r in runs.get(kind, []) if r.get("ok") and r.get("planted")]
        if rows:
            out["module"], out["cause"] = rows[0]["module"], rows[0]["cause"]
        out[f"{kind}_n"] = len(rows)
        out[f"{kind}_booked"] = med(rows, "booked_ms")
        out[f"{kind}_range"] = rng(rows, "booked_ms")
        out[f"{kind}_unattributed"] = med(rows, "unattributed_ms")
        b = out[f"{kind}_booked"]
        out[f"{kind}_ratio"] = b / out["bare_ms"] if out["bare_ms"] and b is not None else None
        out[f"{kind}_ratio_faults"] = b / out["bare_faults_ms"] if out["bare_faults_ms"] and b is not None else None
    return out


def verdict_ok(ok: bool | None) -> str:
    return "n/a" if ok is None else ("ok" if ok else "FAIL")


def acceptance(s: dict) -> dict:
    a = {}
    r = s["cold_ratio"]
    a["cold"] = None if r is None else COLD_LO <= r <= COLD_HI
    p = s["prerun_ratio"]
    a["prerun"] = None if p is None else p <= PRERUN_MAX
    nc = s["prerun_no_cost"]
    a["prerun_verdict"] = None if nc is None else nc >= 0.5
    a["explained_default"] = None if s["trace_share"] is None else s["trace_share"] >= GOAL_DEFAULT
    a["explained_explain"] = None if s["explain_share"] is None else s["explain_share"] >= GOAL_EXPLAIN
    return a


def cell(s: dict, kind: str, value: str) -> str:
    ran, ok = s.get(f"{kind}_ran", 0), s.get(f"{kind}_ok", 0)
    if ran == 0:
        return value
    if ok == 0:
        return "failed"
    return value if ok == ran else f"{value} ({ran - ok} failed)"


def ratio(x: float | None) -> str:
    return fmt(x, ".2f") + ("x" if x is not None else "")


def print_planted(summaries: list[dict]) -> None:
    """The planted cost (zoo.unet_planted) against what the cold traces booked for it in its block."""
    for s in summaries:
        p = s.get("planted")
        if not p:
            continue
        br = p.get("bare_range") or (None, None)
        print()
        print(f"Planted cost ({s['model']}): {p.get('module', '?')}'s first call writes a fresh 64 MiB float32 "
              f"tensor. Alone in a fresh process without warmprof (acc_child.py planted, {p['bare_ok']}/"
              f"{p['bare_ran']} processes; net of its wait for a CPU, {fmt(p.get('bare_wait_ms'), '.2f')} ms): "
              f"{fmt(p['bare_ms'])} ms [{fmt(br[0])}..{fmt(br[1])}], of which the first touch of its pages "
              f"{fmt(p['bare_faults_ms'])} ms (less a second write of the same tensor, "
              f"{fmt(p['bare_rewrite_ms'])} ms).")
        for kind, what in (("trace", "cold trace"), ("explain", "--explain trace")):
            if not p.get(f"{kind}_n"):
                continue
            r = p.get(f"{kind}_range") or (None, None)
            print(f"  {what}: {p.get('cause')} booked in that module {fmt(p[f'{kind}_booked'])} ms "
                  f"[{fmt(r[0])}..{fmt(r[1])}] ({ratio(p[f'{kind}_ratio'])} of the planted cost alone, "
                  f"{ratio(p.get(f'{kind}_ratio_faults'))} of its first touch); "
                  f"unattributed placed in that module {fmt(p[f'{kind}_unattributed'])} ms (medians of "
                  f"{p[f'{kind}_n']})")


def print_once_and_causes(summaries: list[dict]) -> None:
    """Issue 39: the once-per-process row against its bare ground truth, and the default against --explain on
    every cause either books (medians over runs)."""
    once = [s for s in summaries if not s.get("skipped") and s.get("once_bare") is not None]
    if once:
        print()
        print("Paid once per process (ms, medians): bare = the bare excess less the bare excess after one untimed pass "
              "at another shape (acc_child.py bare-other); row = the trace's runtime_init/warm_process row; fired = "
              "traces that booked it.")
        for s in once:
            print(f"  {s['model']:<14} bare {fmt(s['once_bare'], '.2f'):>7}  row {fmt(s['once_booked'], '.2f'):>7}  "
                  f"fired {s['once_fired']}/{s.get('trace_ran', 0)}")
    both = [s for s in summaries if not s.get("skipped") and s.get("by_cause")]
    if both:
        print()
        print("Cause by cause, the default against --explain (ms, medians; explain/default where both book one):")
        for s in both:
            cells = []
            for cause, v in sorted(s["by_cause"].items(), key=lambda kv: -max((x or 0.0) for x in kv[1].values())):
                d, e = v.get("trace"), v.get("explain")
                r = f" {e / d:.2f}x" if d and e is not None and d > 0 else ""
                cells.append(f"{cause} {fmt(d, '.2f')}/{fmt(e, '.2f')}{r}")
            print(f"  {s['model']:<14} " + "; ".join(cells))


def print_tables(summaries: list[dict], answer: dict | None, explain: bool, header: str) -> None:
    print(header)
    print()
    print("First-pass excess, ms (medians over runs; ranges in brackets). trace model exc = the trace's excess "
          "less warmprof's own cost (own); booked = causes other than profiler_overhead and unattributed, "
          "(machine) = of which cpu_contention and wait; wall = trace / --explain trace / pre-run trace; "
          "load = median 1-minute load average before each child.")
    print("Waits for a CPU out (issue 39), ratios of medians: bare exc, waits out = the bare child's (first pass "
          "- its wait for a CPU) - median(steady pass - its wait), schedstat run-queue delay read around each pass "
          "(time off the CPU stays in); headline/bare (waits out) = the report's headline excess less the clean "
          "control's first-pass wait for a CPU beyond its steady passes' (accounting.run_to_run), over bare exc, "
          "waits out; own share, waits out = booked less cpu_contention and less each cause's waited_ms (its wait "
          "inside its own spans), over bare exc, waits out (two processes' figures: it can pass 100%).")
    cols = ["model", "bare excess [range]", "bare exc, waits out [range]", "bare 1st/steady",
            "trace model exc [range]", "own", "trace/bare", "headline/bare (waits out)", "explained",
            "own share, waits out", "explained (instr.)", "run-to-run", "explained --explain",
            "own share, waits out --explain", "prerun booked (machine)", "prerun/bare", "prerun bare exc",
            "wall s (t/e/p)", "load"]
    rows = []
    for s in summaries:
        if s.get("skipped"):
            rows.append([s["model"], f"skipped: {s['skipped']}"] + [""] * (len(cols) - 2))
            continue
        br = s["bare_range"]
        bare_cell = "failed" if not s["bare_ok"] else \
            f"{fmt(s['bare_excess'])} [{fmt(br[0])}..{fmt(br[1])}]"
        bn = s.get("bare_net_range") or (None, None)
        bare_net_cell = "failed" if not s["bare_ok"] else \
            f"{fmt(s.get('bare_net_excess'))} [{fmt(bn[0])}..{fmt(bn[1])}]"
        walls = "/".join(fmt(s[f"{k}_wall"], ".0f") for k in ("trace", "explain", "prerun"))
        rows.append([
            s["model"], bare_cell, bare_net_cell,
            f"{fmt(s['bare_first'])}/{fmt(s['bare_steady'])}",
            cell(s, "trace", f"{fmt(s['trace_model_excess'])} [{fmt((s['trace_range'] or (None, None))[0])}.."
                             f"{fmt((s['trace_range'] or (None, None))[1])}]"),
            cell(s, "trace", fmt(s["trace_own"])),
            ratio(s["cold_ratio"]),
            ratio(s.get("headline_ratio_net")),
            cell(s, "trace", pct(s["trace_share"])),
            cell(s, "trace", pct(s.get("trace_share_waits_out"))),
            cell(s, "trace", pct(s.get("trace_share_instr"))),
            cell(s, "trace", fmt(s.get("trace_run_to_run"))),
            cell(s, "explain", pct(s["explain_share"])) if explain else "not run",
            cell(s, "explain", pct(s.get("explain_share_waits_out"))) if explain else "not run",
            cell(s, "prerun", f"{fmt(s['prerun_booked'])} ({fmt(s['prerun_machine'])})"),
            fmt(s["prerun_ratio"], ".2f") + ("x" if s["prerun_ratio"] is not None else ""),
            fmt(s["prerun_bare_excess"]),
            walls, fmt(s["load"]),
        ])
    widths = [max(len(str(r[i])) for r in rows + [cols]) for i in range(len(cols))]
    line = lambda r: "  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
    print(line(cols))
    print(line(["-" * w for w in widths]))
    for r in rows:
        print(line(r))
    print_planted(summaries)
    print_once_and_causes(summaries)
    print()
    print(f"Acceptance: cold = trace/bare within {COLD_LO}-{COLD_HI}x; prerun = prerun booked/bare <= {PRERUN_MAX}x "
          f"and its verdict says no first-call cost; explained goal >= {GOAL_DEFAULT:.0%} (default), "
          f">= {GOAL_EXPLAIN:.0%} (--explain).")
    acols = ["model", "cold", "prerun", "prerun verdict", "explained", "explained --explain", "schema",
             "(prerun/bare less machine)", "prerun verdict text (first run)"]
    arows = []
    for s in summaries:
        if s.get("skipped"):
            continue
        a = acceptance(s)
        v = next((t for t in s["prerun_verdicts"] if t), None)
        arows.append([s["model"], verdict_ok(a["cold"]), verdict_ok(a["prerun"]), verdict_ok(a["prerun_verdict"]),
                      verdict_ok(a["explained_default"]),
                      verdict_ok(a["explained_explain"]) if explain else "not run",
                      ",".join(s["trace_schema"]) or "-",
                      fmt(s.get("prerun_ratio_less_machine"), ".2f"),
                      (v[:90] + "...") if v and len(v) > 90 else (v or "(no verdict field)")])
    if arows:
        widths = [max(len(str(r[i])) for r in arows + [acols]) for i in range(len(acols))]
        print(line(acols))
        print(line(["-" * w for w in widths]))
        for r in arows:
            print(line(r))
    tv = [(s["model"], t) for s in summaries if not s.get("skipped") for t in s["trace_verdicts"][:1] if t]
    if tv:
        print()
        print("Cold traces' verdicts (first run):")
        for m, t in tv:
            print(f"  {m}: {t}")
    if answer:
        print()
        r = answer.get("ratio")
        print(f"Time to an answer: `warmprof trace --demo --threads 1 --quiet` {fmt(answer.get('trace_wall'), '.2f')} s "
              f"against a plain fresh process building the demo and running 11 passes "
              f"{fmt(answer.get('plain_wall'), '.2f')} s (medians of {answer.get('runs')}; "
              f"{answer.get('trace_ok')}/{answer.get('runs')} traces ok): {fmt(r, '.2f')}x, acceptance <= {ANSWER_MAX}x: "
              f"{verdict_ok(None if r is None else r <= ANSWER_MAX)}")


# ---------------------------------------------------------------- main

def interpreter(args) -> str:
    if args.python:
        return args.python
    venv = args.venv or os.environ.get("VIRTUAL_ENV")
    if venv:
        return os.path.join(venv, "bin", "python")
    return sys.executable


def describe(py: str) -> dict:
    c = Child([py, "-c", "import json, torch, warmprof; print(json.dumps({'torch': torch.__version__, "
                         "'warmprof': warmprof.__version__, 'warmprof_file': warmprof.__file__}))"], 120, HERE)
    d = json.loads(c.stdout.strip().splitlines()[-1]) if c.ok else {"error": tail(c.stderr, 5)}
    src = os.path.join(os.path.dirname(os.path.dirname(py)), "warmprof-source.txt")
    if os.path.exists(src):
        with open(src) as f:
            d["source"] = dict(line.rstrip("\n").split(" ", 1) for line in f if " " in line)
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="see the module docstring and bench/ACCURACY.md")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help=f"comma-separated, from {', '.join(ZOO)}, or a group: "
                         f"{'; '.join(f'{k} = {chr(44).join(v)}' for k, v in GROUPS.items())} "
                         f"(default {','.join(DEFAULT_MODELS)})")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes of each kind per model (default 3)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--venv", help="run the children with VENV/bin/python (default: $VIRTUAL_ENV, else this "
                                  "interpreter); torchvision models need /work/venv-acc214")
    g.add_argument("--python", help="run the children with this interpreter")
    ap.add_argument("--install", metavar="TREE", help="first (re)install warmprof, non-editable, from this source "
                                                      "tree into the venv (bench/acc_venvs.sh install)")
    ap.add_argument("--install-rev", metavar="REV", help="with --install: that commit's files, not the working tree")
    ap.add_argument("--json", metavar="PATH", help="save every raw figure here")
    ap.add_argument("--keep", metavar="DIR", help="keep every trace report here")
    ap.add_argument("--no-explain", action="store_true", help="skip the --explain traces")
    ap.add_argument("--no-prerun", action="store_true", help="skip the pre-run variants")
    ap.add_argument("--no-once", action="store_true",
                    help="skip the bare child that runs another shape first (the once-per-process ground truth)")
    ap.add_argument("--no-answer-time", action="store_true", help="skip the time-to-an-answer check")
    ap.add_argument("--no-prime", action="store_true",
                    help="no dropped bare child before each model's runs (the first child after a pause pays the "
                         "library pages the machine reclaimed meanwhile)")
    ap.add_argument("--steady", type=int, default=30, help="steady passes in the bare child (default 30)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per child (default 900)")
    ap.add_argument("--wait-load", type=float, default=None, metavar="LOAD",
                    help="before each child, wait (at most --wait-max s) for the 1-minute load average to drop "
                         "below LOAD")
    ap.add_argument("--wait-max", type=float, default=120)
    ap.add_argument("--report", nargs="+", metavar="JSON",
                    help="run nothing: print the tables again from files saved with --json (several: one table, "
                         "e.g. the torch 2.13 and the torch 2.14 venv's runs)")
    args = ap.parse_args(argv)
    if args.report:
        return reprint(args.report)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    models = []
    for m in (m.strip() for m in args.models.split(",") if m.strip()):  # a group name stands for its models
        models += [g for g in GROUPS.get(m, (m,)) if g not in models]
    bad = [m for m in models if m not in ZOO]
    if bad:
        ap.error(f"unknown model(s) {', '.join(bad)}: choose from {', '.join(ZOO)} or the groups "
                 f"{', '.join(GROUPS)}")
    py = interpreter(args)
    if not os.path.exists(py):
        ap.error(f"no interpreter at {py}")
    if args.install:
        venv = os.path.dirname(os.path.dirname(py))
        cmd = ["bash", VENVS_SH, "install", venv, args.install] + ([args.install_rev] if args.install_rev else [])
        log(f"installing: {' '.join(cmd)}")
        if subprocess.run(cmd).returncode != 0:
            log("install failed")
            return 1
    env = describe(py)
    if "error" in env:
        log(f"{py} cannot import torch and warmprof:\n{env['error']}")
        return 1
    src = env.get("source", {})
    header = (f"accuracy: interpreter {py}; torch {env['torch']}; warmprof {env['warmprof']} from "
              f"{src.get('tree', env['warmprof_file'])} at {src.get('commit', '?')[:10]} "
              f"(changed files: {src.get('changed_files', '?')}); runs {args.runs}; host {platform.node()} "
              f"{os.cpu_count()} cpus; {time.strftime('%Y-%m-%d %H:%M')}")
    log(header)
    explain = not args.no_explain
    raw: dict = {"header": header, "interpreter": py, "env": env, "runs": args.runs, "models": {}}
    summaries = []
    workdir = tempfile.mkdtemp(prefix="warmprof-acc-")
    t_all = time.monotonic()
    try:
        for name in models:
            missing = has_packages(py, ZOO[name]["needs"])
            if missing:
                log(f"{name}: skipped, {py} has no {missing}")
                summaries.append({"model": name, "skipped": f"no {missing} in this interpreter"})
                raw["models"][name] = {"skipped": f"no {missing}"}
                continue
            runs: dict[str, list[dict]] = {"bare": [], "trace": []}
            if explain:
                runs["explain"] = []
            if not args.no_prerun:
                runs["prerun_bare"], runs["prerun"] = [], []
            if not args.no_prime:
                # One bare child first, its figures dropped: the first process after a pause (an install,
                # the last model) can pay 5-25 ms more on a first pass than the children after it, bare
                # and traced alike (its major faults are logged, to tell page reads back apart).
                primed = bare(py, name, args)
                log(f"{name}: priming child (dropped): bare excess {fmt(primed.get('excess_ms'), '.2f')} ms, "
                    f"{primed.get('first_major_faults', '?')} major faults in its first pass")
                raw.setdefault("primed", {})[name] = primed
            for i in range(1, args.runs + 1):
                t_run = time.monotonic()
                b = bare(py, name, args)
                runs["bare"].append(b)
                t = trace(py, name, name, False, args, workdir, f"{name}-trace-{i}")
                runs["trace"].append(t)
                msg = (f"{name} run {i}/{args.runs}: bare excess {fmt(b.get('excess_ms'), '.2f')} ms (waits out "
                       f"{fmt(b.get('net_excess_ms'), '.2f')}); trace model "
                       f"excess {fmt(t.get('model_excess_ms'), '.2f')} ms, booked {fmt(t.get('booked_ms'), '.2f')}, "
                       f"own {fmt(t.get('own_ms'), '.2f')}, own causes waits out "
                       f"{fmt(t.get('own_waits_out_ms'), '.2f')}, "
                       f"headline waits out {fmt(t.get('headline_net_ms'), '.2f')}, {fmt(t.get('wall_s'), '.0f')} s")
                if not args.no_once:
                    bo = bare(py, name, args, "bare-other")
                    runs.setdefault("bare_other", []).append(bo)
                    msg += (f"; bare after another shape {fmt(bo.get('excess_ms'), '.2f')} ms, once-per-process row "
                            f"{fmt(t.get('once_ms'), '.2f')}")
                if ZOO[name].get("planted"):
                    pc = planted(py, args)
                    runs.setdefault("planted", []).append(pc)
                    msg += (f"; planted cost alone {fmt(pc.get('planted_net_ms'), '.2f')} ms, booked in its block "
                            f"{fmt((t.get('planted') or {}).get('booked_ms'), '.2f')}")
                if explain:
                    e = trace(py, name, name, True, args, workdir, f"{name}-explain-{i}")
                    runs["explain"].append(e)
                    msg += f"; explain share {pct(e.get('share'))}, {fmt(e.get('wall_s'), '.0f')} s"
                if not args.no_prerun:
                    pb = bare(py, f"{name}_prerun", args)
                    runs["prerun_bare"].append(pb)
                    p = trace(py, name, f"{name}_prerun", False, args, workdir, f"{name}-prerun-{i}")
                    runs["prerun"].append(p)
                    msg += (f"; prerun bare excess {fmt(pb.get('excess_ms'), '.2f')}, prerun booked "
                            f"{fmt(p.get('booked_ms'), '.2f')} ms")
                log(msg + f" ({time.monotonic() - t_run:.0f} s)")
            s = summarise(name, runs, args.runs)
            summaries.append(s)
            raw["models"][name] = {"runs": runs, "summary": s, "acceptance": acceptance(s)}
            if args.json:  # save as we go: a long run that dies keeps what it had
                _save(args.json, raw)
        answer = None
        if not args.no_answer_time:
            answer = answer_time(py, args)
            raw["answer_time"] = answer
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    raw["elapsed_s"] = time.monotonic() - t_all
    if args.json:
        _save(args.json, raw)
    print_tables(summaries, answer, explain, header)
    log(f"done in {raw['elapsed_s'] / 60:.1f} min")
    return 0


def reprint(paths: list[str]) -> int:
    summaries, headers, answer, explain = [], [], None, False
    for path in paths:
        with open(path) as f:
            raw = json.load(f)
        headers.append(raw.get("header", path))
        for name, m in raw.get("models", {}).items():
            if "runs" in m:  # summarised again from the raw rows, so a file saved by an older harness reads too
                for rows in m["runs"].values():
                    for r in rows:
                        if r.get("ok") and "booked_less_machine_ms" not in r and _num(r.get("booked_ms")) is not None:
                            r["booked_less_machine_ms"] = r["booked_ms"] - (r.get("machine_ms") or 0.0)
                summaries.append(summarise(name, m["runs"], raw.get("runs", 0)))
                explain = explain or bool(m["runs"].get("explain"))
            else:
                summaries.append({"model": name, "skipped": m.get("skipped", "?")})
        answer = answer or raw.get("answer_time")
    print_tables(summaries, answer, explain, "\n".join(headers))
    return 0


def answer_time(py: str, args) -> dict:
    plain, traced, ok = [], [], 0
    warmprof_bin = os.path.join(os.path.dirname(py), "warmprof")
    cli = [warmprof_bin] if os.path.exists(warmprof_bin) else [py, "-m", "warmprof"]
    for i in range(1, args.runs + 1):
        wait_for_load(args.wait_load, args.wait_max)
        p = Child([py, CHILD, "plain-demo"], args.timeout, HERE)
        if p.ok:
            plain.append(p.wall_s)
        else:
            p.failure("plain demo")
        wait_for_load(args.wait_load, args.wait_max)
        t = Child(cli + ["trace", "--demo", "--threads", "1", "--quiet"], args.timeout, HERE)
        if t.ok:
            traced.append(t.wall_s)
            ok += 1
        else:
            t.failure("trace --demo")
        log(f"answer time run {i}/{args.runs}: plain demo {p.wall_s:.2f} s, trace --demo {t.wall_s:.2f} s")
    pw = statistics.median(plain) if plain else None
    tw = statistics.median(traced) if traced else None
    return {"plain_wall": pw, "trace_wall": tw, "plain_all": plain, "trace_all": traced, "runs": args.runs,
            "trace_ok": ok, "ratio": tw / pw if pw and tw else None, "cli": cli}


def _save(path: str, raw: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(raw, f, indent=1, default=str)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
