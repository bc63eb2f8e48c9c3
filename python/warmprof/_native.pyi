"""warmprof native core: clock, recorder, host counters, CUDA/CUPTI/Metal backends.

Typed stub of the extension built from csrc/bindings.cpp. tests/native/test_stub_sync.py keeps
its names and parameters equal to the module's; classes here are type-only and start with "_".
"""

from typing import Any, Callable, TypedDict

import numpy as np
import numpy.typing as npt
from typing_extensions import NotRequired

__version__: str
NUM_CAUSES: int
RECORD_BYTES: int

class _Drained(TypedDict):
    ts_ns: npt.NDArray[np.int64]
    kind: npt.NDArray[np.uint8]
    cause: npt.NDArray[np.uint8]
    name: npt.NDArray[np.uint32]
    value: npt.NDArray[np.int64]
    thread: npt.NDArray[np.uint16]
    names: list[str]
    dropped: int
    thinned: int
    own_fault_ns: npt.NDArray[np.int64]
    threads: int
    os_tids: list[int]

class _Calibration(TypedDict):
    source: str
    ns_per_tick: float
    samples: int
    spread: float

class _ClockInfo(_Calibration):
    invariant_tsc: bool
    refined: bool  # slope re-taken over the process lifetime at a recording's start

class _FaultCost(TypedDict):
    ns_per_fault: float
    ns_per_page: float
    faults: int
    pages: int
    trials: int

class _FirstTouch(TypedDict):
    bytes: int
    cpu_ns: list[float]  # one per trial, in thread CPU time
    faults: list[int]

class _Backend(TypedDict):
    compiled: bool
    available: bool
    reason: str
    path: NotRequired[str]  # cupti only: the libcupti file in use, "" if none

class _CuptiOverhead(TypedDict):
    kind: str  # "module_loading", "lazy_function_loading", "driver_compiler"
    cause: int  # runtime_init (a load) or jit_compile (the driver's compiler)
    start_ns: int  # warmprof's clock (monotonic ns)
    end_ns: int
    thread: int  # CUPTI's thread id (0: the record names no thread)
    this_thread: bool  # the record names the calling thread

class _CuptiOverheads(TypedDict):
    records: list[_CuptiOverhead]
    dropped: int
    enabled: bool
    reason: str  # why they are off ("" while on)

class _MetalBuild(TypedDict):
    length: int
    seen: bool  # False: the length's first build; True: the re-build of a seen length
    specialise_ns: int  # newFunctionWithName:constantValues:error:
    pipeline_ns: int  # newComputePipelineStateWithFunction:error:

class _MetalDispatch(TypedDict):
    length: int
    index: int  # 0: the first dispatch after the pipeline was built
    gpu_start_s: float  # MTLCommandBuffer.GPUStartTime
    gpu_end_s: float  # MTLCommandBuffer.GPUEndTime
    host_commit_s: float  # mach time (s) before commit
    host_done_s: float  # mach time (s) after waitUntilCompleted
    host_ns: int  # warmprof's clock around commit + waitUntilCompleted

class _MetalProbe(TypedDict):
    device: str
    error: str  # '' when every stage ran
    device_ns: int
    library_ns: int  # newLibraryWithSource:options:error:
    kernel: str
    rows: int
    builds: list[_MetalBuild]
    dispatches: list[_MetalDispatch]
    row_sums: dict[int, float]  # length -> sum of row 0's softmax output

class _TapTaken(TypedDict):
    lines: list[bytes]
    segments: list[int]  # per line: markers removed before it
    write_error: str
    dropped: int
    failure: str

class _CuptiStats(TypedDict):
    kernel_launches: int
    new_kernel_count: int
    new_kernels: list[str]
    subscribe_ns: float
    callbacks: int
    pool_hits: int
    untracked_kernels: int
    refused_callbacks: int

# Hot entry points (raw METH_FASTCALL: positional only).
def begin(cause: int, name: int, /) -> None:
    """Open a span on this thread."""

def end(cause: int, name: int, /) -> None:
    """Close the innermost span on this thread."""

def instant(cause: int, name: int, value: int = 0, /) -> None:
    """Record a point event."""

def counter(name: int, value: int, /) -> None:
    """Record a counter sample."""

def sample_host(rss: bool = True, /) -> None:
    """Record host counters (minor/major faults, threads, and RSS and file-backed bytes unless rss is False) now."""

def module_enter(name: int, coarse: bool, /) -> bool:
    """A module call opens: host counters and a begin, unless thinned; whether it was recorded."""

def module_exit(name: int, /) -> bool:
    """A module call closes: an end and host counters, if its enter was recorded; whether it was."""

def now_ticks() -> int:
    """The raw clock, in ticks."""

# Recorder (cold).
def start(spare_buffers: int = 0) -> None:
    """Start a recording generation: every thread's buffer is emptied; this thread's buffer and spare_buffers more are pre-faulted now."""

def stop() -> None:
    """Stop recording; records stay until drain() and release()."""

def begin_section(sections_left: int) -> None:
    """A pass begins: module budgets are an equal share of the room left for this and the later passes."""

def release() -> None:
    """Return every recording buffer's pages to the system (after stop() and drain())."""

def enabled() -> bool: ...
def set_boundary_gap_ns(ns: float) -> None:
    """How far apart module boundaries take the host counters, per thread: at least `ns` after the last sample (0: every boundary; negative: the default, 40 times the cheapest sample so far). Pass boundaries always do."""
def boundary_gap_ns() -> float:
    """The gap in force now (ns): module boundaries closer than this to the last host sample take none."""
def intern(name: str) -> int:
    """Interned id of a span/counter name."""

def names() -> list[str]: ...
def drain() -> _Drained:
    """Records of the current generation as numpy arrays (ts_ns, kind, cause, name, value, thread)."""

def record_at(kind: int, cause: int, name: int, value: int, ticks: int) -> bool:
    """Append a record with an explicit timestamp (instruments that learn times after the fact)."""

def cpp_span_cost_ns(name: int, iterations: int) -> float:
    """Mean ns of one begin+end pair recorded from C++."""

# Clock.
def clock_info() -> _ClockInfo: ...
def clock_read_cost_ns(iterations: int) -> float:
    """Mean ns of one raw clock read (the hot-path clock) in a C++ loop."""

def now_ns() -> int:
    """CLOCK_MONOTONIC in ns."""

def ticks_to_ns(ticks: int) -> int: ...
def ns_to_ticks(ns: int) -> int: ...
def calibrate_clock(pairs: int, duration_ms: float) -> _Calibration:
    """A fresh calibration (does not replace the cached one)."""


# Host counters and calibration probes.
def faults() -> tuple[int, int]:
    """(minor, major) page faults of this process so far."""

def rss_bytes() -> int: ...
def file_bytes() -> int:
    """Resident file-backed or shared bytes (RssFile + RssShmem, /proc/self/statm); 0 where unavailable."""

def thread_count() -> int: ...
def thread_schedstat() -> tuple[int, int, int] | None: ...
def thread_involuntary_switches() -> int: ...
def thread_times() -> dict[str, int] | None:
    """The calling thread's clocks, as module boundaries record them: {'ns' (monotonic, read last), 'cpu_ns',
    'run_delay_ns', 'voluntary' (switches), 'storage_read_bytes', 'major_faults'}; None where the kernel has no
    schedstat or no RUSAGE_THREAD."""
def task_schedstats() -> dict[int, dict[str, int | None]]: ...
def page_size() -> int: ...
def calibrate_fault_cost(bytes: int = 33554432, trials: int = 5) -> _FaultCost: ...
def fresh_allocation_ns(bytes: int, trials: int = 5) -> float: ...
def first_touch(bytes: int, trials: int = 5, huge: bool = False) -> _FirstTouch:
    """First touch of `bytes` of fresh memory, `trials` times (MADV_HUGEPAGE if huge, else MADV_NOHUGEPAGE): {'bytes', 'cpu_ns': [...], 'faults': [...]}, one entry per trial, in thread CPU time."""

def thread_start_samples(trials: int = 31) -> list[float]:
    """ns of each of `trials` thread starts and joins (wall), in the order taken."""

def thread_start_ns(trials: int = 9) -> float: ...

# Backends.
def backends() -> dict[str, _Backend]:
    """backend name -> {compiled, available, reason}; cupti adds path (the libcupti file in use, '' if none)"""

def metal_probe(lengths: list[int], repeats: int) -> _MetalProbe:
    """The Metal reference probe (Apple): the kernel's library compiled once, a pipeline per length (function constant), `repeats` dispatches each with their GPU times, each length built again; raw figures, error '' unless a stage failed. ValueError for bad arguments, RuntimeError with the reason where Metal is unavailable."""

def cupti_set_search_path(dirs: list[str]) -> None:
    """Folders to look for libcupti in, after a copy already in the process and before the sonames."""

def cupti_start() -> str:
    """Subscribe to CUPTI; '' on success, else the reason."""

def cupti_stop() -> str:
    """Unsubscribe; '' when clean (or nothing was subscribed), else why not (the subscription was torn down)."""

def cupti_overheads() -> _CuptiOverheads:
    """CUPTI's OVERHEAD records since the last call (lazy module/function loads, the driver's PTX compiles), timed by the driver, in warmprof's clock; {records, dropped, enabled, reason}."""

def cupti_check() -> str:
    """'' while warmprof's CUPTI subscription stands (or none is active), else why it no longer does."""

def cupti_active() -> bool: ...
def cupti_set_recording(on: bool) -> None:
    """Whether CUPTI's handler writes into the recorder (watch(cupti=True) turns it off while it holds CUPTI)."""
def cupti_thread_tally() -> dict[int, tuple[int, int, int]]:
    """cause id -> (spans, ns, bytes) the CUPTI handler booked on this thread (cumulative; what watch reads)."""
def cupti_stats() -> _CuptiStats: ...
def cupti_classify(domain: int, cbid: int) -> int:
    """Cause id for a CUPTI (domain, callback id), or -1 when ignored."""

def cupti_callback_name(domain: int, cbid: int) -> str: ...
def cupti_handler_cost_ns(iterations: int) -> float:
    """ns warmprof's handler adds to one CUPTI callback here (a repeat launch through the real callback entry; CUPTI's own dispatch not included); 0.0 when the backend is not compiled."""

# CUDA events (driver API): failures raise RuntimeError with the reason.
def cuda_event_record(stream: int = 0, device: int = -1) -> int:
    """Record a pooled CUDA event on `stream` (a CUstream as an int) in that stream's context; its slot id. The default stream (0) is taken as `device`'s (or, with -1, the current context's)."""

def cuda_event_elapsed_ms(start: int, end: int) -> float:
    """GPU milliseconds between two recorded slots (waits for `end`)."""

def cuda_events_release() -> None:
    """Return every CUDA event slot to the pool (the events are kept for reuse)."""

def cuda_events_pool_size() -> int:
    """CUDA events created so far."""

# fd tap (instruments/fd_capture.py): the native reader of the pipe that stands in for fd 1.
def tap_start(read_fd: int, out_fd: int, prefixes: list[bytes], marker: bytes, keep: bytes = b"") -> str:
    """Read the pipe on a native thread (takes both descriptors): lines from a prefix to their newline that contain `keep` are stored, the rest goes to out_fd; '' on success, else the reason."""

def tap_wait_mark(count: int, timeout_s: float) -> bool:
    """Whether the reader removed `count` markers within the timeout."""

def tap_take() -> _TapTaken:
    """Stored lines (taken out) with the markers seen before each, and the reader's state."""

def tap_stop(grace_s: float, busy_s: float) -> tuple[str, int]:
    """After fd 1 is restored: ('ended', -1), ('handoff', read end: writers remain), ('busy', -1) or ('none', -1)."""

def tap_forward(read_fd: int, out_fd: int) -> str:
    """Forward read_fd to out_fd on a detached thread until it ends (takes both)."""

# C stdout tap (runs/onednn.py): oneDNN's creation lines taken out of a process's C stdout (glibc).
def stdio_tap_start(prefixes: list[str], cause: int) -> str:
    """Swap C stdout for a line filter (glibc): lines from a prefix are taken, creation misses recorded; '' on success, else the reason."""

def stdio_tap_stop() -> None:
    """C stdout back (flushed); a no-op without a tap."""

def stdio_tap_miss_ns() -> int:
    """The creation misses' times so far in ns on this thread (oneDNN's own figures): a thread-local read, the GIL kept."""

def stdio_tap_stats() -> dict[str, Any]:
    """The C stdout tap's counts: taken lines, creation misses (recorded) and hits, bytes let through."""

# Test-only entry points (tests/, bench/): the submodule `_native._testing`.
class _TestingModule:
    @staticmethod
    def set_capacity(records_per_thread: int) -> None: ...
    @staticmethod
    def capacity() -> int: ...
    @staticmethod
    def median(values: list[float]) -> float:
        """The clock calibration's median."""

    @staticmethod
    def percentile(values: list[float], q: float) -> float: ...
    @staticmethod
    def cupti_inject(
        domain: int, cbid: int, enter: bool, ticks: int, value: int = 0, failed: bool = False
    ) -> None:
        """Deliver a synthetic CUPTI callback through the real handler."""
    @staticmethod
    def cupti_inject_load(domain: int, cbid: int, enter: bool, ticks: int, image: bytes, arch: int = 0) -> None:
        """A module load with its image (a path for file loads) as CUPTI's own callback data, decoded by the real path."""
    @staticmethod
    def cupti_inject_unparamed(domain: int, cbid: int, enter: bool, ticks: int, symbol: str = "") -> None:
        """An API callback with no parameter struct (functionParams NULL) and `symbol` as its symbolName, through the real callback entry."""
    @staticmethod
    def cupti_inject_query(domain: int, cbid: int, enter: bool, ticks: int, kernel: int) -> None:
        """A kernel query with its own parameter struct naming the function `kernel`, through the real callback entry."""
    @staticmethod
    def cupti_call_now(cbid: int, value: int, pairs: int = 1) -> None:
        """Enter/exit pairs of cuLaunchKernel (function `value`) or cuMemAlloc_v2 (`value` bytes) through the real callback entry, the clock read inside."""
    @staticmethod
    def cupti_launch_heap_bytes(first_kernel: int, kernels: int, name: str) -> int:
        """Heap bytes taken by `kernels` first launches through the handler (0: the hot path allocates nothing)."""
    @staticmethod
    def cupti_enabled_callbacks() -> list[tuple[int, int]]:
        """(domain, cbid) pairs the subscriber enables, from start()'s own enabling routine."""
    @staticmethod
    def stdio_split(chunks: list[bytes], prefixes: list[str], cut: list[bool] = ...) -> tuple[bytes, list[bytes]]:
        """The C stdout tap's filter over chunks (each one write; cut[i]: it may end mid-line): (passthrough, lines)."""
    @staticmethod
    def stdio_parse(line: str) -> tuple[str, str, float]:
        """A oneDNN line as the C stdout tap reads it: (outcome, primitive, ms; -1 if unreadable)."""
    @staticmethod
    def tap_split(chunks: list[bytes], prefixes: list[bytes], marker: bytes) -> tuple[bytes, list[bytes], list[int]]:
        """The reader's splitter over chunks (b'' = the pipe is empty here): (passthrough, lines, segments)."""

_testing: _TestingModule

# The module hooks (instruments/modules.py): one object is a module's pre-hook and its post-hook.
class ModuleHook:
    name: int
    coarse: bool
    root: bool
    open: int
    thinned: bool
    def __init__(self, name: int, coarse: bool, on_thin: Callable[[], Any] | None = None, root: bool = False) -> None: ...
    def __call__(self, module: Any, args: tuple[Any, ...], output: Any = ..., /) -> None: ...
    def reset(self) -> None: ...

class ModuleForward:
    """A module's forward wrapped in its span (csrc/bindings.cpp): set as the module's `forward`."""
    hook: ModuleHook
    __wrapped__: Callable[..., Any]
    def __init__(self, hook: ModuleHook, forward: Callable[..., Any]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

# warmprof.watch's hot path (csrc/watch_type.cpp); python/warmprof/serving/watch/core.py subclasses it.
class WatchCall(tuple[Any, ...]):
    """One kept call, as watch's hot path hands it over (fields declared in csrc/watch_type.cpp)."""
    n_fields: int
    n_sequence_fields: int
    n_unnamed_fields: int
    key_hash: int
    key: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] | None
    first: bool
    outlier: bool
    start_ns: int
    dur_ns: int
    gap_ns: int
    clock: Any
    cpu_ns: int
    minflt: int
    majflt: int
    nivcsw: int
    compiles: int
    compile_ns: int
    calls_before: int
    median_ns: float
    cupti: list[tuple[int, int, int, int]] | None
    inblock: int
    run_delay_ns: int | None
    cpu_exact: bool
    usual_off_cpu_ns: float
    nvcsw: int | None
    counters_from_ns: int
    def __new__(cls, fields: Any) -> "WatchCall": ...

class WatchCore:
    def __init__(self, fn: Any, key_fn: Any = None, clock_source: Any = None, max_keys: int = 10000,
                 min_calls: int = 8, factor: float = 3.0, floor_ns: int = 50000, idle_ns: int = 1000000000) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...
    def _set_on_event(self, cb: Any) -> None: ...
    def _set_closed(self, flag: bool) -> None: ...
    def _set_cupti(self, mask: int) -> None: ...
    def _core_stats(self) -> dict[str, Any] | None: ...
    def _after_fork_in_child(self) -> None: ...

def watch_note_compile(ns: int) -> None: ...
def watch_set_input_error(cls: type[BaseException]) -> None: ...
def watch_sketch_midpoints() -> list[float]: ...
