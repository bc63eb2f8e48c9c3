"""What a cause entry's count counts (causes.COUNT_UNITS, issue 38): every source the package emits has
a unit, found by reading the package's code, so a new source without one fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import warmprof
from warmprof import causes
from warmprof.causes import Name, count_label, count_unit

PACKAGE = Path(warmprof.__file__).resolve().parent
# The C++ sources lie in the checkout beside tests/, wherever the package is installed (CI installs it
# into a venv's site-packages, where PACKAGE.parent.parent has no csrc).
CSRC = Path(__file__).resolve().parents[2] / "csrc"

# The calls that carry a cause's source, and where the source is when given by position.
SOURCE_AT = {"Part": 1, "Figure": 1, "CallPart": 1, "CauseEntry": 4, "Bracketed": 0}
# Calls that name a span or a counter on the timeline (the name's argument index): a cause span's
# source is its name's prefix before ':' (timeline.source_of).
NAME_AT = {"name_id": 0, "record_span_ns": 1, "intern": 0}
# Timeline names that are no cause span: structure (passes, modules, ops, set-up steps) and counters.
NOT_CAUSE_PREFIXES = ("module", "pass", "op", "step", "warmprof", "host", "torch.cuda")
NOT_CAUSE_NAMES = {"torch:nvrtc_cache_file"}  # timeline.NVRTC_CACHE_FILE, a counter
# Arguments the scan cannot read a source from, each a source made elsewhere and passed on (a span's
# source_of, an entry copied, a trigger's source); (file, expression). A new one is a new way a source
# is made: read where it comes from, give that source a unit, then add it here.
PASSED_ON = {
    ("attribution/estimators.py", "src"),  # cause_spans: source_of(a cause span's name)
    ("runs/agent.py", "n"),  # agent.HOST_COUNTER_NAMES: the host counters' names (counters, no cause span)
    ("runs/agent.py", "OWN_SPAN"),  # ops.OWN_SPAN, "warmprof:agent" (read in runs/ops.py, where it is made)
    ("attribution/estimators.py", "e.source"),  # inferred_figures: an instrument's Figure
    ("attribution/estimators.py", "source"),  # cpu_contention: a wait inside a cause span, on that span's own (cause, source)
    ("attribution/off_cpu.py", "source"),  # the lowered span part's own key
    ("attribution/off_cpu.py", "src"),  # a wait kept in a cause span, on that span's own (cause, source)
    ("attribution/calls.py", "source"),  # _bracketed_parts: "dynamo" or a trigger's source (compiles.TRIGGERS)
    ("attribution/calls.py", "part.source"),  # _fit: the part's own
    ("traces/build.py", "p.source"),  # a Part as a CauseEntry
    ("traces/setup_phase.py", "p.source"),
    ("traces/explain.py", "source"),  # WARM_SOURCE or OWN_SOURCE
    ("report/repeat.py", "self.main_source(c.cause)"),  # a run's own entry's source
    ("serving/watch/events.py", "kind"),  # a bracketed stretch's trigger source (compiles.TRIGGERS)
    ("serving/watch/events.py", "COMPILE_SOURCE"),  # compiles.TRIGGERS["DYNAMO"]'s source
    ("timeline.py", "name"),  # span(), begin()'s callers' names
    ("serving/warmup.py", "c.source"),  # a compile event's trigger source (compiles.TRIGGERS)
    ("instruments/cupy.py", "span"),  # _wrap's span name: "cupy:kernel_cache", f"cupy:{kind}" (scanned as strings)
    ("instruments/torch_compile.py", "name"),  # a trigger's source (compiles.TRIGGERS)
    ("instruments/torch_compile.py", "pname"),  # phases()' names (checked below)
}


def _constants(tree: ast.Module) -> dict[str, object]:
    """The module's top-level names bound to a string, or to a dict of strings."""
    out: dict[str, object] = {}
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if not isinstance(target, ast.Name):
            continue
        try:
            out[target.id] = ast.literal_eval(value)
        except ValueError:
            pass
    return out


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = (path, ast.parse(path.read_text()))
    return out


MODULES = _modules()
CONSTANTS = {name: _constants(tree) for name, (_, tree) in MODULES.items()}


def _imported(module: str, tree: ast.Module) -> dict[str, tuple[str, str]]:
    """name -> (module it comes from, its name there), for every `from X import name` in the module."""
    package = module if MODULES[module][0].name == "__init__.py" else module.rsplit(".", 1)[0]
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package.split(".")
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            src = ".".join(base + ([node.module] if node.module else []))
        else:
            src = node.module or ""
        for a in node.names:
            out[a.asname or a.name] = (src, a.name)
    return out


def _value(module: str, name: str, depth: int = 0) -> object | None:
    if name in CONSTANTS.get(module, {}):
        return CONSTANTS[module][name]
    if depth > 4 or module not in MODULES:
        return None
    src = _imported(module, MODULES[module][1]).get(name)
    return _value(src[0], src[1], depth + 1) if src else None


def _source(module: str, node: ast.expr) -> tuple[str, bool] | None:
    """(the source, whole) an argument gives: a whole string, or (whole False) the constant text of
    an f-string or `"x:" + y` before its first variable part; None where the scan cannot read it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.Name):
        v = _value(module, node.id)
        return (v, True) if isinstance(v, str) else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
        d = _value(module, node.value.id)
        v = d.get(node.slice.value) if isinstance(d, dict) else None
        return (v, True) if isinstance(v, str) else None
    head = None
    if isinstance(node, ast.JoinedStr):  # its text up to the first part that is no constant
        head = ""
        for v in node.values:
            got = _source(module, v.value) if isinstance(v, ast.FormattedValue) and not v.format_spec else None
            if isinstance(v, ast.Constant):
                head += str(v.value)
            elif got is not None and got[1]:
                head += got[0]
            else:
                break
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        got = _source(module, node.left)
        head = got[0] if got else None
    if isinstance(head, str) and ":" in head:
        return head.split(":", 1)[0], False
    return None


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _argument(node: ast.Call, at: int, keyword: str) -> ast.expr | None:
    for k in node.keywords:
        if k.arg == keyword:
            return k.value
    return node.args[at] if len(node.args) > at and not isinstance(node.args[at], ast.Starred) else None


def _scan() -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(entry sources: (file, source, whole)), (span and counter names: (file, name)), (arguments not
    read: (file, expression))."""
    sources, names, unread = [], [], []
    for module, (path, tree) in MODULES.items():
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            fn = _callee(node)
            if fn in SOURCE_AT:
                arg = _argument(node, SOURCE_AT[fn], "source")
                if arg is None:
                    continue  # no source given: a class's own default, or `**fields` from a stored report
                got = _source(module, arg)
                if got is None:
                    unread.append((rel, ast.unparse(arg)))
                else:
                    sources.append((rel, *got))
            elif fn in NAME_AT:
                arg = _argument(node, NAME_AT[fn], "name")
                got = _source(module, arg) if arg is not None else None
                if got is None:
                    unread.append((rel, ast.unparse(arg) if arg is not None else fn))
                else:
                    names.append((rel, got[0]))
        if rel == "instruments/cupy.py":  # span names handed to _wrap, which names them
            names += [(rel, n.value) for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("cupy:")]
    return sources, names, unread


def _native_names() -> list[tuple[str, str]]:
    """The names the C++ recorder interns: intern("a:b") and intern(std::string("a:") + ...)."""
    out = []
    assert CSRC.is_dir(), f"no C++ sources at {CSRC}"
    for path in sorted(CSRC.rglob("*.cpp")):
        for m in re.finditer(r'intern\((?:std::string\()?"([^"]+)"', path.read_text()):
            out.append((path.name, m.group(1)))
    return out


SOURCES, NAMES, UNREAD = _scan()


def _has_unit(source: str, whole: bool) -> bool:
    """A whole source has a row of its own (a new "mps:x" beside "mps:pipeline" is no "mps" compile); the
    constant head of an f-string ("storage_in" of f"storage_in:{src}") is a row's key."""
    return source in causes.COUNT_UNITS


def test_the_scan_reads_what_it_should():
    """The scan finds the sources it is there to find: a scan that read nothing would pass anything."""
    found = {s for _, s, _ in SOURCES}
    assert {"host_faults", "file_pages", "storage", "storage_in", "run_queue", "off_cpu", "instrumented_steady",
            "torch:nvrtc", "probe", "warm_process", "clock", "mps:pipeline", "mps:driver_allocated", "page_faults",
            "thread_blocked"} <= found
    spans = {n for _, n in NAMES}
    assert {"cudnn:find", "cudnn:first_call", "mps:compile_shader", "cupy:kernel_cache", "cupti:stream_capture"} <= (
        spans | {n for _, n in _native_names()})


def test_every_source_an_entry_is_made_with_has_a_unit():
    missing = sorted({(f, s) for f, s, whole in SOURCES if not _has_unit(s, whole)})
    assert not missing, f"sources with no unit in causes.COUNT_UNITS: {missing}"


def test_every_source_constant_has_a_unit():
    """A module's own name for a source (ONCE_SOURCE, explain.WARM_SOURCE, NVRTC_SOURCE, ...): a source
    handed on through a variable, which the scan of calls cannot read, is caught here."""
    got = {(m, k, v) for m, names in CONSTANTS.items() for k, v in names.items()
           if k.endswith("SOURCE") and isinstance(v, str)}
    assert {v for _, _, v in got} >= {"warm_process", "warm_same_shape", "probe", "torch:nvrtc", "python_import"}
    missing = sorted((m, k, v) for m, k, v in got if count_unit(v) is None and v not in causes.COUNT_UNITS)
    assert not missing, f"source constants with no unit in causes.COUNT_UNITS: {missing}"


def test_every_cause_span_name_has_a_unit():
    """A cause span's source is its name's prefix before ':'; structure and counters are no cause."""
    missing = []
    for where, name in NAMES + _native_names():
        source = name.split(":", 1)[0]
        if source in NOT_CAUSE_PREFIXES or name in NOT_CAUSE_NAMES:
            continue
        if source not in causes.COUNT_UNITS:
            missing.append((where, name))
    assert not missing, f"span names whose source has no unit in causes.COUNT_UNITS: {sorted(set(missing))}"


def test_every_argument_the_scan_cannot_read_is_a_known_one():
    """A source given as an expression the scan cannot read is a new way sources are made: it must be
    looked at (and its sources given units) before it is added to PASSED_ON."""
    new = sorted(set(UNREAD) - PASSED_ON)
    assert not new, f"source or span-name arguments the scan cannot read: {new}"


def test_trigger_call_and_compile_phase_sources_have_units():
    from warmprof.attribution import calls, compiles
    from warmprof.instruments.torch_compile import phases

    for source, _ in compiles.TRIGGERS.values():  # a trace's span names and a call's bracketed sources
        assert count_unit(source) is not None, source
    for source in calls.SOURCES.values():
        assert source in causes.COUNT_UNITS, source
    timers = {"compile_fx.compile_fx_inner": 1.0, "OutputGraph.call_user_compiler": 3.0,
              "GraphLowering.compile_to_module": 0.5, "autotune_select_algorithm": 0.1}
    names = {name for _, name, _ in phases(timers, 10.0)}
    assert "torch.compile/dynamo" in names
    for name in names:
        assert name in causes.COUNT_UNITS, name


def test_every_unit_is_a_pair_of_words():
    for key, unit in [*causes.COUNT_UNITS.items(), *causes.COUNT_UNITS_BY_CAUSE.items()]:
        if unit is not None:
            one, many = unit
            assert one and many and one != many and not one[0].isdigit(), key
    for cause, _ in causes.COUNT_UNITS_BY_CAUSE:
        assert causes.get(cause) is not None, cause


@pytest.mark.parametrize(("source", "count", "cause", "want"), [
    ("host_faults", 2179, None, "x2179 faults"),
    ("file_pages", 307, Name.RUNTIME_INIT, "x307 faults"),
    ("warm_process", 8, None, "x8 sites"),
    ("off_cpu:clean_pass", 42112, Name.DISK_READ, "x42112 storage reads"),
    ("run_queue", 3, Name.CPU_CONTENTION, "x3 preemptions"),
    ("storage_in:torch.compile", 12, Name.DISK_READ, "x12 pages"),  # by its prefix
    ("run_queue_in:onednn", 0, Name.CPU_CONTENTION, ""),
    ("off_cpu", 4, Name.WAIT, "x4 blocks"),  # a trace's wait: blocks
    ("off_cpu", 4, Name.CPU_CONTENTION, "x4 preemptions"),  # a call's contention: involuntary switches
    ("thread_blocked", 6, Name.DISK_READ, "x6 storage reads"),
    ("thread_blocked", 6, Name.WAIT, "x6 blocks"),
    ("torch.compile", 1, Name.JIT_COMPILE, ""),  # one: said by the row itself, as the renderers always have
    ("torch.compile", 0, Name.JIT_COMPILE, ""),
    ("clock:nvml", 2, Name.CLOCK_RAMP, "x2"),  # no unit: a bare count, never hidden
    ("somebody_elses", 5, None, "x5"),  # not in the table: a bare count
])
def test_count_label(source, count, cause, want):
    assert count_label(source, count, cause) == want


def test_count_label_says_one_when_asked():
    assert count_label("torch.compile", 1, show_one=True) == "x1 compile"
    assert count_label("torch.compile", 2, show_one=True) == "x2 compiles"
    assert count_label("torch.compile", 0, show_one=True) == ""
    assert count_label("somebody_elses", 1, show_one=True) == "x1"
