"""What differs between the torch releases warmprof runs on (2.9 to 2.15), in one place.

Every read of a torch API that is private, or that a release added, renamed or changed, goes through
here, with the branch for a torch that lacks it beside the one for a torch that has it; each branch has
a test (tests/unit/test_torch_compat.py, with stand-ins for the torch objects). What was checked on real
releases (2.9.1, 2.13.0, 2.14.1, 2.15.0, by tests/unit/test_torch_compat.py's live tests and the
support table in docs/install.md): all of them have the newer branch of each; the older branches serve
a torch outside the range, a build without dynamo or the profiler's C extension, and the releases to come.

- dynamo's compile callbacks: torch._dynamo.callback_handler's register/remove pairs, whose callbacks
  get one CallbackArgs (callback_trigger, compile_id) in 2.6 and later and no argument before.
- dynamo's compilation metrics: torch._dynamo.utils.get_compilation_metrics() (records with
  recompile_reason), and its inclusive timers compilation_time_metrics (name -> seconds per call).
- The profiler's C config: _ExperimentalConfig(capture_overload_names=) (2.5 and later) and
  ProfilerConfig's positional arguments; _RecordFunctionFast (2.2 and later) or record_function.
- torch.load(weights_only=) (1.13 and later), torch.compiler.cudagraph_mark_step_begin (2.1 and later),
  and the CUDA caching allocator's memory_stats() keys.

Nothing here imports torch at module level: warmprof imports without it."""

from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

# -- dynamo's compile callbacks --------------------------------------------------------------------


def dynamo_callbacks(*, import_dynamo: bool = False) -> Any | None:
    """dynamo's callback handler (register_start_callback / register_end_callback and their removes),
    or None: torch._dynamo not imported yet (unless `import_dynamo`: importing it costs 1-2 s and leaves
    an inductor folder behind), or a torch without it or without those four methods."""
    if not import_dynamo and "torch._dynamo" not in sys.modules:
        return None
    try:
        import torch._dynamo  # noqa: F401
        from torch._dynamo import callback_handler
    except Exception:
        return None
    if not all(hasattr(callback_handler, n) for n in ("register_start_callback", "register_end_callback",
                                                        "remove_start_callback", "remove_end_callback")):
        return None
    return callback_handler


def remove_callback(remove: Callable[[Any], Any], callback: Any) -> None:
    """One remove_*_callback call; a callback the handler no longer holds (removed already, or the
    handler reset by torch._dynamo.reset() in some releases) is no error."""
    try:
        remove(callback)
    except ValueError:
        pass


def registered_callbacks() -> int:
    """How many compile callbacks dynamo's handler holds now (0 without one; tests check that none is
    left behind). Its lists are start_callbacks / end_callbacks in every release that has them."""
    handler = dynamo_callbacks()
    if handler is None:
        return 0
    return sum(len(getattr(handler, name, ()) or ()) for name in ("start_callbacks", "end_callbacks"))


def callback_fields(args: tuple) -> tuple[str, str]:
    """(trigger name, compile id) of what a compile callback got: a CallbackArgs (torch 2.6 and later:
    callback_trigger, an enum, and compile_id), or nothing (earlier): then ("DYNAMO", "")."""
    if not args:
        return "DYNAMO", ""
    first = args[0]
    trig = getattr(first, "callback_trigger", None)
    name = getattr(trig, "name", None) or (trig if isinstance(trig, str) else None) or "DYNAMO"
    cid = getattr(first, "compile_id", None)
    return str(name), "" if cid is None else str(cid)


# -- dynamo's compilation metrics ------------------------------------------------------------------


def compilation_metrics() -> list[Any]:
    """dynamo's CompilationMetrics records so far ([] where torch._dynamo is not imported, or has no
    get_compilation_metrics)."""
    if "torch._dynamo" not in sys.modules:
        return []
    try:
        from torch._dynamo import utils
    except Exception:
        return []
    get = getattr(utils, "get_compilation_metrics", None)
    if get is None:
        return []
    try:
        return list(get())
    except Exception:
        return []


def recompile_reason(record: Any) -> str | None:
    """A compilation metrics record's recompile reason (None: a first compile, or a record without the
    field)."""
    reason = getattr(record, "recompile_reason", None)
    return str(reason) if reason else None


def compile_time_metrics(*, import_dynamo: bool = True) -> dict[str, list[float]] | None:
    """dynamo's inclusive timers, torch._dynamo.utils.compilation_time_metrics (name -> the seconds of
    each call), the live dict; None where torch has none. Its key names (OutputGraph.call_user_compiler,
    _compile.compile_inner, compile_fx_inner, ...) are read by instruments.torch_compile with a list of
    alternatives each, so a renamed one is missed rather than misread."""
    if not import_dynamo and "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo import utils
    except Exception:
        return None
    metrics = getattr(utils, "compilation_time_metrics", None)
    return metrics if isinstance(metrics, dict) else None


# -- the profiler's C API --------------------------------------------------------------------------


def kineto_cpu_config(profiler: Any = None) -> Any:
    """The ProfilerConfig for a CPU-only KINETO session that records input shapes and overload names.
    `profiler`: torch._C._profiler (a stand-in in tests). RuntimeError, with the reason, where this
    torch's profiler records no overload names (_ExperimentalConfig without capture_overload_names:
    before 2.5) or has no such config."""
    if profiler is None:
        import torch._C._profiler as profiler
    experimental_cls = getattr(profiler, "_ExperimentalConfig", None)
    config_cls = getattr(profiler, "ProfilerConfig", None)
    if experimental_cls is None or config_cls is None:
        raise RuntimeError("this torch's profiler has no _ExperimentalConfig / ProfilerConfig")
    try:
        experimental = experimental_cls(capture_overload_names=True)
    except TypeError as e:  # an older torch: no overload names, so no op names to replay
        raise RuntimeError(f"this torch's profiler records no overload names ({e})") from None
    # state, report_input_shapes, profile_memory, with_stack, with_flops, with_modules, experimental_config
    return config_cls(profiler.ProfilerState.KINETO, True, False, False, False, False, experimental)


def record_function_fast(profiler: Any = None) -> Callable[[str], Any]:
    """A RecordFunction context manager for a name: _RecordFunctionFast (torch 2.2 and later, a C++
    object with no Python frame of its own), else torch.autograd.profiler.record_function."""
    if profiler is None:
        try:
            import torch._C._profiler as profiler
        except Exception:
            profiler = None
    fast = getattr(profiler, "_RecordFunctionFast", None) if profiler is not None else None
    if fast is not None:
        return fast
    from torch.autograd.profiler import record_function

    return record_function


# -- torch.load, cudagraph trees, the CUDA allocator -----------------------------------------------


def load_weights_only(torch: Any, path: str) -> tuple[Any, bool]:
    """(what torch.load read from `path` onto the CPU, whether it was read with weights_only=True). A
    torch whose load has no weights_only (before 1.13) unpickles anything: the caller says so."""
    try:
        safe = "weights_only" in inspect.signature(torch.load).parameters
    except (TypeError, ValueError):  # no signature to read: try the keyword
        safe = True
    if safe:
        return torch.load(path, map_location="cpu", weights_only=True), True
    return torch.load(path, map_location="cpu"), False


def cudagraph_step_marker(torch: Any) -> Callable[[], None] | None:
    """torch.compiler.cudagraph_mark_step_begin (2.1 and later), or None."""
    return getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)


# The CUDA caching allocator's memory_stats() keys warmprof reads, each with the names it had or may
# have: the first present is read (the same in 2.9-2.15).
MEMORY_STATS_KEYS: dict[str, tuple[str, ...]] = {
    "segments": ("segment.all.allocated",),
    "segments_current": ("segment.all.current",),
    "device_allocs": ("num_device_alloc",),
    "device_frees": ("num_device_free",),
    "alloc_retries": ("num_alloc_retries",),
    "ooms": ("num_ooms",),
    "reserved_bytes": ("reserved_bytes.all.allocated",),
    "reserved_bytes_current": ("reserved_bytes.all.current",),
}


def memory_stat(stats: dict[str, Any], name: str) -> int | None:
    """One of MEMORY_STATS_KEYS from a memory_stats() dict; None where none of its names is there (a
    torch that does not count it, or an allocator that was never used: memory_stats() is then {})."""
    for key in MEMORY_STATS_KEYS[name]:
        if key in stats:
            return int(stats[key])
    return None


__all__ = ["MEMORY_STATS_KEYS", "callback_fields", "compilation_metrics", "compile_time_metrics",
           "cudagraph_step_marker", "dynamo_callbacks", "kineto_cpu_config", "load_weights_only", "memory_stat",
           "record_function_fast", "recompile_reason", "registered_callbacks", "remove_callback"]
