"""The one table of causes: every cause warmprof can name, and everything derived from it.

A row gives the cause's recorder id (mirrored from csrc/core/causes.h; a test parses that header
and checks it), the name written in report JSON, the label and colours the renderers draw with,
whether a warm-up pass removes it, and the advice shown when it dominates (a line for every
device, and one for CUDA devices only: CUDA's environment variables, cuDNN and CUDA graphs mean
nothing on a CPU trace). Timeline ids, report validation, PNG and Chrome colours and advice all
read this table, so a new cause is one row here plus its meaning in shared/design/ARCHITECTURE.md
(and, when instruments record it, one enum value in causes.h).

Every lookup reads the table when called: `register()` (tests, extensions) is seen at once.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

from . import _native
from .errors import WarmprofError


@dataclass(frozen=True)
class Cause:
    """One cause of first-pass excess."""

    id: int | None  # recorder id (csrc/core/causes.h); None: computed, never recorded
    name: str  # the id in report JSON ("jit_compile")
    label: str  # for people ("JIT compile")
    colour: str  # PNG bar colour (#rrggbb)
    chrome_colour: str  # a reserved colour name of the Chrome/Perfetto trace viewer
    warmup_fixes: bool  # a warm-up pass at the served shapes moves it before traffic
    blamed_on_model: bool = True  # False: warmprof's own cost, or the residual; never advised on
    advice: str = ""  # the generic line when it dominates, true on any device (traces/advice.py adds per-source lines)
    cuda_advice: str = ""  # a CUDA-only line after it, given only for a trace on a CUDA device


# Not a cause: passes, modules, phases (where, not why). Recorded with id 0.
STRUCTURE = 0

_ROWS: list[Cause] = [
    Cause(1, "jit_compile", "JIT compile", "#d62728", "terrible", True,
          advice="Run one pass per served shape at start-up so code generation happens before traffic."),
    Cause(2, "algorithm_selection", "algorithm selection", "#ff7f0e", "bad", True,
          advice="Algorithm search runs per new shape: warm the served shapes at start-up.",
          cuda_advice="When the served shapes vary, turn off cuDNN's benchmarking with "
                      "torch.backends.cudnn.benchmark=False."),
    Cause(3, "graph_capture", "graph capture", "#9467bd", "rail_animation", True,
          advice="Graphs are captured per shape: warm each served shape or bucket at start-up.",
          cuda_advice="CUDA graphs' cudagraph trees record on a shape's 2nd call: warm each bucket with two passes."),
    Cause(4, "allocator_growth", "allocator growth", "#bcbd22", "yellow", True,
          advice="Memory pools grow on first use: a warm-up pass at the largest served shape pre-grows them.",
          cuda_advice="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fresh cudaMalloc calls."),
    Cause(5, "runtime_init", "runtime init", "#1f77b4", "olive", True,
          advice="One-time runtime start-up (context, libraries, thread pools): do one tiny op on the device at "
                 "process start.",
          cuda_advice="CUDA_MODULE_LOADING=EAGER moves CUDA's lazy kernel loading to start-up."),
    Cause(6, "data_transfer", "data transfer", "#17becf", "rail_load", False,
          advice="Stage weights on the device before serving: model.to(device) at start-up.",
          cuda_advice="Copy inputs from pinned host buffers, made with tensor.pin_memory(): the copies skip a staging "
                      "buffer and can run asynchronously."),
    Cause(7, "clock_ramp", "clock ramp", "#e377c2", "rail_idle", True,
          advice="The device clocks were low at the start: a short warm-up burst before traffic raises them."),
    Cause(8, "profiler_overhead", "profiler overhead", "#8c564b", "grey", False, blamed_on_model=False),
    # The model's threads were ready to run and had no CPU (schedstat run-queue delay): other work on
    # the machine, or more threads than CPUs. Paid on any call the machine is busy for, first or not.
    Cause(9, "cpu_contention", "CPU contention", "#393b79", "thread_state_runnable", False,
          advice="The model's threads waited for a CPU: this is the machine's load, not a first-call cost, and no "
                 "warm-up removes it. Give the process CPUs of its own (taskset, a CPU quota or request), or fewer "
                 "threads than CPUs (torch.set_num_threads); trace again on a quieter machine for the first-call figures."),
    # Python's cyclic garbage collector ran (gc.callbacks' start to stop, the collection's own time): a full
    # collection that the set-up left due (building a model makes many objects) lands in the first call that
    # allocates, and scans every object the model holds.
    Cause(10, "garbage_collection", "garbage collection", "#98df8a", "cq_build_attempt_passed", True,
          advice="Python's garbage collector ran a collection on the first call (building the model made many "
                 "objects, so one was due): call gc.collect() and then gc.freeze() after loading the model, before "
                 "traffic, so the collection runs at start-up and later ones skip the model's objects. torch.compile "
                 "also collects after each compile (torch._dynamo.config.run_gc_after_compile): warming the compiled "
                 "shapes moves those."),
    # Off-CPU time the pass thread spent neither running nor waiting for a CPU (its wall time less its
    # CPU time less its run-queue delay, at module boundaries): a sleep, a lock, a socket, a remote store.
    Cause(None, "wait", "off-CPU wait", "#7f7f7f", "thread_state_sleeping", True,
          advice="The model's thread waited off the CPU on its first call (a sleep, a lock, a network call, a remote "
                 "store): do that wait once at start-up (open the connection, fetch the file, take the lock) before "
                 "traffic."),
    # Pages read from storage: major faults (mapped weights or library code read lazily) and block reads
    # (a file read on a cold page cache), priced by the off-CPU time they took.
    Cause(None, "disk_read", "disk read", "#aec7e8", "thread_state_iowait", True,
          advice="Pages were read from disk on the first call (a cold page cache: weights or library code read "
                 "lazily): read them at start-up (load the weights eagerly, a warm-up pass) or keep them in the page "
                 "cache."),
    Cause(None, "unattributed", "unattributed", "#d9d9d9", "generic_work", False, blamed_on_model=False),
]


def _id(name: str) -> int:
    return next(c.id for c in _ROWS if c.name == name and c.id is not None)


# Recorder ids as constants, for instruments (`begin(JIT_COMPILE, ...)`).
JIT_COMPILE = _id("jit_compile")
ALGORITHM_SELECTION = _id("algorithm_selection")
GRAPH_CAPTURE = _id("graph_capture")
ALLOCATOR_GROWTH = _id("allocator_growth")
RUNTIME_INIT = _id("runtime_init")
DATA_TRANSFER = _id("data_transfer")
CLOCK_RAMP = _id("clock_ramp")
PROFILER_OVERHEAD = _id("profiler_overhead")
CPU_CONTENTION = _id("cpu_contention")
GARBAGE_COLLECTION = _id("garbage_collection")

class Name:
    """Each cause's name as a constant, for code that books or tests a cause: outside this table no
    file spells out cause names (a test checks each constant is a row's name)."""

    JIT_COMPILE = "jit_compile"
    ALGORITHM_SELECTION = "algorithm_selection"
    GRAPH_CAPTURE = "graph_capture"
    ALLOCATOR_GROWTH = "allocator_growth"
    RUNTIME_INIT = "runtime_init"
    DATA_TRANSFER = "data_transfer"
    CLOCK_RAMP = "clock_ramp"
    PROFILER_OVERHEAD = "profiler_overhead"
    CPU_CONTENTION = "cpu_contention"
    GARBAGE_COLLECTION = "garbage_collection"
    WAIT = "wait"
    DISK_READ = "disk_read"
    UNATTRIBUTED = "unattributed"


UNATTRIBUTED = Name.UNATTRIBUTED  # computed: the excess less what the causes explain
OWN = Name.PROFILER_OVERHEAD  # warmprof's own cost: reported, never advised on

# How a report knows a figure, strongest first.
EVIDENCE = ("measured", "estimated", "inferred", "residual")


# -- What a cause entry's count counts, by its source ------------------------------------------------
# A cause entry (report CauseEntry, attribution Part, a call's CallPart) carries a count beside its
# source: what the figure is made of. It counts a different thing per source; this table says what,
# as (one, many). A source is looked up whole, then by its prefix before ':' (a cause span's source is
# already that prefix: timeline.source_of). None: the count is no count of anything (always 0 or 1:
# one inferred figure, a part carved out of another), shown, if ever above 1, as a bare "x{n}".
# A source not here is shown as a bare "x{n}" too; tests/unit/test_count_units.py fails on a source
# the package emits that is not here.
COUNT_UNITS: dict[str, tuple[str, str] | None] = {
    # Cause spans (attribution.estimators.cause_spans): the spans of the source that own some time.
    "torch.compile": ("compile", "compiles"),  # dynamo's compile callbacks (torch.compile:compile, :lazy_backward)
    # torch's compile timers split each compile span into these phases: one phase span per compile
    "torch.compile/dynamo": ("compile", "compiles"),
    "torch.compile/aot_autograd": ("compile", "compiles"),
    "torch.compile/inductor": ("compile", "compiles"),
    "torch.compile/codegen_and_cxx_compile": ("compile", "compiles"),
    "torch.compile/autotune": ("compile", "compiles"),
    "cudagraphs": ("recording", "recordings"),  # cudagraphs:record, a CUDA graph recording dynamo bracketed
    "triton": ("autotuning run", "autotuning runs"),  # triton:autotune
    "cupti": ("call", "calls"),  # CUDA calls CUPTI timed (module loads, mallocs, copies, captures; its overhead records)
    "cudnn": ("call", "calls"),  # convolution calls bracketed: cuDNN's first call, a benchmark find
    "onednn": ("primitive", "primitives"),  # oneDNN primitives created (cache misses its verbose output placed)
    "python_import": ("import", "imports"),
    "gc": ("collection", "collections"),  # Python's garbage collections (gc:gen0, gc:gen1, gc:gen2 spans)
    "python_metadata": ("scan", "scans"),  # importlib.metadata.entry_points() calls (import_spans.time_metadata_scans)
    "mps": ("compile", "compiles"),  # mps:compile_shader
    "cupy": ("call", "calls"),  # CuPy's kernel-cache misses and the NVRTC/NVCC compiles inside them
    # Estimators (attribution.estimators, attribution.off_cpu)
    "host_faults": ("fault", "faults"),  # anonymous first-touch faults beyond a steady pass's
    "file_pages": ("fault", "faults"),  # faults on file-backed pages (a call's too: attribution.calls)
    "thread_pool": ("thread", "threads"),  # threads started
    "module_hooks": ("module call", "module calls"),
    "cupti_callbacks": ("callback", "callbacks"),
    "op_view": ("op", "ops"),  # distinct ops the op view dispatched for the first time
    "run_queue": ("preemption", "preemptions"),  # the pass thread's involuntary context switches
    "run_queue_in": None,  # run_queue_in:<source>: a wait carved out of a cause span's time (no count kept)
    "off_cpu": ("block", "blocks"),  # a pass's wait: its voluntary context switches no read accounts for
    "storage": ("page", "pages"),  # pages read from disk (bytes read / page size, or major faults)
    "storage_in": ("page", "pages"),  # storage_in:<source>: the same, inside a cause span
    "torch:nvrtc": ("compile", "compiles"),  # new files in torch's NVRTC kernel cache
    "instrumented_steady": ("pass", "passes"),  # the instrumented steady passes measured
    # Figures instruments infer (instruments/*.py inferred())
    "clock": None,  # clock:<reader>: one clock-ramp figure a pass
    "mps:pipeline": None,  # one pipeline-compile figure
    "mps:driver_allocated": ("module", "modules"),  # one figure per module the growth was placed in
    "op": ("shape", "shapes"),  # op:<ns::name>: a watched op's first calls at new shapes (runs/ops.py figures)
    # Folds after the passes (traces: the controls, --explain)
    "warm_process": ("site", "sites"),  # unattributed rows (modules, or (module, op) sites) it was placed over
    "warm_same_shape": ("site", "sites"),
    "probe": ("site", "sites"),  # (module, op) sites the op probes' verdicts were booked at
    "run_queue:clean_pass": None,  # the clean first pass's own wait for a CPU (count 1: that pass)
    "off_cpu:clean_pass": ("storage read", "storage reads"),  # its major faults + blocks read from storage
    # A call's parts (attribution.calls.SOURCES: warmup, assert_warm, watch)
    "dynamo": ("compile", "compiles"),
    "dynamo_counters": ("graph", "graphs"),  # graphs dynamo's counters say it produced
    "page_faults": ("fault", "faults"),
    "cuda_caching_allocator": None,  # its growth in bytes, no count
    "idle_clock": None,  # one clock-ramp figure
    "thread_blocked": ("block", "blocks"),  # a call's wait: its voluntary context switches no read accounts for
}
# Where one source counts different things by cause: (cause, source) first.
COUNT_UNITS_BY_CAUSE: dict[tuple[str, str], tuple[str, str] | None] = {
    (Name.CPU_CONTENTION, "off_cpu"): ("preemption", "preemptions"),  # a call's: its involuntary context switches
    (Name.DISK_READ, "thread_blocked"): ("storage read", "storage reads"),  # a call's major faults + blocks read
}


def count_unit(source: str, cause: str | None = None) -> tuple[str, str] | None:
    """(one, many) of what a cause entry of `source` (and `cause`) counts; None where the table has
    no unit for it (a source not in COUNT_UNITS, or one whose count counts nothing)."""
    keys = [source] + ([source.split(":", 1)[0]] if ":" in source else [])
    for key in keys:
        if cause is not None and (cause, key) in COUNT_UNITS_BY_CAUSE:
            return COUNT_UNITS_BY_CAUSE[(cause, key)]
        if key in COUNT_UNITS:
            return COUNT_UNITS[key]
    return None


def count_label(source: str, count: int, cause: str | None = None, *, show_one: bool = False) -> str:
    """A cause entry's count with what it counts: "x2179 faults", "x8 sites" ("x1 compile" with
    show_one); "" for a count of 1 or less (a single one is said by the row itself), unless show_one
    (then "" for 0 or less). A source with no unit (count_unit) gets a bare "x{n}". `cause` picks the
    unit where one source counts different things by cause (COUNT_UNITS_BY_CAUSE)."""
    count = int(count)
    if count < 1 or (count == 1 and not show_one):
        return ""
    unit = count_unit(source, cause)
    if unit is None:
        return f"x{count}"
    return f"x{count} {unit[0] if count == 1 else unit[1]}"


def id_of(name: str) -> int:
    """The recorder id of a recorded cause (KeyError for one never recorded)."""
    ids = {n: cid for cid, n in recorded().items()}
    return ids[name]


def names() -> tuple[str, ...]:
    """Every cause name a report may carry, "unattributed" included."""
    return tuple(c.name for c in _ROWS)


def get(name: str) -> Cause | None:
    for c in _ROWS:
        if c.name == name:
            return c
    return None


def label(name: str) -> str:
    c = get(name)
    return c.label if c is not None else name.replace("_", " ")


def recorded() -> dict[int, str]:
    """Recorder id -> cause name, for the causes instruments record (not the residual)."""
    return {c.id: c.name for c in _ROWS if c.id is not None}


def register(cause: Cause) -> None:
    """Add a cause (placed before the residual). A name or recorder id already taken is refused."""
    if get(cause.name) is not None:
        raise WarmprofError(f"cause {cause.name!r} is already in the table")
    if cause.id is not None and (cause.id == STRUCTURE or cause.id in recorded()):
        raise WarmprofError(f"cause id {cause.id} is already taken")
    if cause.id is not None and not 0 < cause.id < _native.NUM_CAUSES:
        raise WarmprofError(f"cause id {cause.id}: the recorder takes ids 1..{_native.NUM_CAUSES - 1} (csrc/core/causes.h); "
                            "a cause no instrument records has id None")
    _ROWS.insert(len(_ROWS) - 1, cause)


def unregister(name: str) -> None:
    if name == UNATTRIBUTED or get(name) is None:
        raise WarmprofError(f"cannot remove cause {name!r}")
    _ROWS[:] = [c for c in _ROWS if c.name != name]


@contextlib.contextmanager
def added(cause: Cause) -> Iterator[Cause]:
    """The table with `cause` in it for the duration of the block."""
    register(cause)
    try:
        yield cause
    finally:
        unregister(cause.name)
