"""The instruments a trace on a CUDA device runs, in the order they are entered.

    cuda_instruments(options) -> list[Instrument]

Options read (all optional):
- "device": the torch.device (or "cuda:N" string) the model runs on; default: torch's current
  CUDA device. Picks the allocator's device, the NVML GPU and the stream for CUDA events.
- "compiled": bool, the model runs under torch.compile; adds torch's CUDA-graph / autotune
  timers as a per-pass reference (the spans come from the torch.compile instrument), and leaves
  out the cuDNN-find hooks (global module hooks would be traced into, or guard, the compiled
  graph, and compiled convolutions never call them).
- "stream": a CUstream handle (int) or a callable returning one, for the CUDA events; default:
  torch's current stream on the device at each pass start.
- "cupti": bool (default True); False leaves CUPTI free for another tool.
- "cupy": bool or None (default None = only when cupy is already imported).
- "clock_sample_ms": float (default 10), the period of the SM-clock sampler.

torch's NVRTC kernel cache (instruments/kernel_cache.py) is always watched: a new file in it during
a pass is a jiterator compile.

Every instrument is returned even when unavailable here: it carries its `reason`, which the
report lists, so a missing source is said rather than dropped. CUPTI comes first so its
subscribe cost is recorded before the others start.
"""

from __future__ import annotations

import sys

from .base import Instrument
from .clock_ramp import ClockRamp
from .cuda import Cupti
from .cuda_events import CudaEvents, device_index
from .cupy import Cupy
from .kernel_cache import TorchKernelCache
from .torch_cuda import CudnnFind, InductorCudaMetrics, TorchCudaAllocator


def cuda_instruments(options: dict) -> list[Instrument]:
    device = options.get("device")
    out: list[Instrument] = []
    events = CudaEvents(device=device, stream=options.get("stream"))
    if options.get("cupti", True):
        out.append(Cupti(gpu_ms=lambda: events.gpu_ms))  # no callback while the GPU worked: CUPTI delivered nothing
    out.append(events)
    out.append(TorchCudaAllocator(device=device))
    if options.get("compiled"):
        out.append(InductorCudaMetrics())
    else:
        out.append(CudnnFind())
    out.append(TorchKernelCache())  # torch's own NVRTC compiles (jiterator), read off its kernel cache
    use_cupy = options.get("cupy")
    if use_cupy or (use_cupy is None and "cupy" in sys.modules):
        out.append(Cupy())
    # the CUDA events' GPU time of each pass bounds the busy time a slow clock can have cost
    out.append(ClockRamp(cuda_index=max(device_index(device), 0), sample_ms=float(options.get("clock_sample_ms", 10.0)),
                         gpu_ms=events.gpu_ms.get))
    return out


def cuda_setup_instruments(options: dict) -> list[Instrument]:
    """The set-up's CUDA instruments (moving the model to the device, making the inputs): CUPTI
    only (option "cupti", default True), which sees the CUDA context created and the weights copied
    there. Nothing that touches CUDA when it starts: the events and the allocator's statistics
    would create the context themselves, before the set-up they are there to time."""
    return [Cupti()] if options.get("cupti", True) else []


__all__ = ["cuda_instruments", "cuda_setup_instruments"]
