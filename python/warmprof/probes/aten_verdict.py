"""The verdict for one probed aten op: which once-per-process or per-shape cause its first call pays.

Pure, over the child's figures (ms), so every rule is unit-tested on synthetic timings. The noise
rules and bands are those of verdict.py: an excess counts beyond the steady spread's noise floor and
above the launch band; inside the allocation band (fresh memory of the op's working set) it is
allocator growth; above it, the keying decides: paid again by new shapes of the warm op is a
per-shape cost (jit_compile; for the matmul/conv families, the device's library cause: oneDNN's
primitive build on the CPU; on CUDA a lazily loaded kernel, runtime_init, since cuBLAS/cuBLASLt and
cuDNN pick by heuristics, and algorithm_selection only when TunableOp or cudnn.benchmark makes them
benchmark), paid once is runtime_init.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import devices
from ..causes import Name
from ..report.op_probe import VERDICTS
from ..stats import median
from .verdict import (
    NOISE_WIDTHS,
    RowBands,
    Timing,
    band_of,
    has_tax,
    is_cached,
    noise_floor_ms,
    too_noisy,
)

CAUSES = tuple(v for v in VERDICTS if v != "failed")
# Ops whose CPU kernels go through oneDNN (mkldnn) primitives or, on a GPU, cuBLAS/cuDNN algorithm
# choice: built or chosen per shape.
MATMUL_CONV = frozenset({
    "addmm", "mm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "einsum",
    "conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "mkldnn_convolution", "_mkldnn_linear", "mkldnn_linear", "cudnn_convolution",
    "_scaled_mm", "_addmm_activation",
})


@dataclass(frozen=True)
class VariantTiming:
    """A new shape of the warm op: its first call and its own steady calls."""

    first_ms: float
    steady_ms: float
    steady_p10_ms: float
    steady_p90_ms: float

    @property
    def timing(self) -> Timing:
        return Timing(self.first_ms, self.steady_ms, self.steady_p10_ms, self.steady_p90_ms)


@dataclass(frozen=True)
class OpTiming:
    first_ms: float
    steady_ms: float
    steady_p10_ms: float
    steady_p90_ms: float
    rerun_ms: float | None
    launch_hi_ms: float
    alloc_hi_ms: float
    variants: list[VariantTiming] = field(default_factory=list)
    shape_alloc_hi_ms: float | None = None  # the allocation band at the largest new shape's working set

    @property
    def timing(self) -> Timing:
        return Timing(self.first_ms, self.steady_ms, self.steady_p10_ms, self.steady_p90_ms, self.rerun_ms)

    @property
    def bands(self) -> RowBands:
        return RowBands(self.launch_hi_ms, self.alloc_hi_ms)

    @property
    def cold_excess_ms(self) -> float:
        return self.timing.excess_ms

    @property
    def shape_excess_ms(self) -> float | None:
        """Median over the new shapes of (first call - that shape's steady); None when none ran."""
        if not self.variants:
            return None
        return median(v.timing.excess_ms for v in self.variants)

    @property
    def shape_noise_ms(self) -> float:
        return median(noise_floor_ms(v.timing) for v in self.variants) if self.variants else 0.0


def family(op: str) -> str:
    """'matmul/conv' for the oneDNN / cuBLAS / cuDNN families, else ''."""
    parts = op.split(".")
    name = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]
    return "matmul/conv" if name in MATMUL_CONV else ""


def shape_pays(t: OpTiming) -> bool | None:
    """Do new shapes of the warm op pay a first-call tax above noise and the launch band? None: not asked."""
    x = t.shape_excess_ms
    if x is None:
        return None
    return x > max(t.shape_noise_ms, t.launch_hi_ms)


CONV = frozenset(n for n in MATMUL_CONV if "conv" in n)


def library_of(op: str) -> str:
    """"conv" (cuDNN on CUDA) or "matmul" (cuBLAS/cuBLASLt) for the matmul/conv families, else ''."""
    if not family(op):
        return ""
    parts = op.split(".")
    name = parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]
    return "conv" if name in CONV else "matmul"


def compile_cause(op: str, device_type: str, library: dict | None = None) -> str:
    """A per-shape cost's cause: in a matmul/conv library op, the device kind's (devices.py:
    oneDNN's primitive build on cpu, a lazily loaded kernel on CUDA), algorithm_selection on CUDA
    when the library benchmarks per shape (`library`: instruments.torch_cuda.library_settings() as
    the probe's child read it: TunableOp for GEMMs, cudnn.benchmark for convolutions); else a compile."""
    if not family(op):
        return Name.JIT_COMPILE
    if library:  # read only where the kind reads its libraries (devices.DeviceKind.library_settings)
        from ..instruments.torch_cuda import shape_cost_cause

        if shape_cost_cause(library_of(op), library) == Name.ALGORITHM_SELECTION:
            return Name.ALGORITHM_SELECTION
    return devices.of(device_type).library_shape_cause


def judge_op(t: OpTiming, op: str, device_type: str = "cpu", library: dict | None = None) -> tuple[str, str]:
    """(cause, evidence sentence) for one op. cause is one of CAUSES. library: whether the CUDA
    libraries benchmark per shape in the probe's child (torch_cuda.library_settings()); None: no."""
    tm = t.timing
    ev = [f"first {_n(t.first_ms)} ms vs steady {_n(t.steady_ms)} ms (p10-p90 {_n(t.steady_p10_ms)}-"
          f"{_n(t.steady_p90_ms)}): cold excess {_n(t.cold_excess_ms)} ms"]
    if too_noisy(tm):
        ev.append(f"the steady spread {_n(tm.spread_ms)} ms exceeds its median and the excess does not clear "
                  f"{NOISE_WIDTHS:g} spreads: too noisy to tell")
        return "too_noisy", _join(ev)
    if not has_tax(tm) or t.cold_excess_ms <= t.launch_hi_ms:
        ev.append(f"within the noise floor ({_n(noise_floor_ms(tm))} ms) or the launch band "
                  f"(<= {_n(t.launch_hi_ms)} ms): no first-call cost found")
        return "none", _join(ev)
    ev.append(_shape_sentence(t))
    cached = is_cached(tm, t.bands)
    if cached is not None:
        ev.append(f"seen-shape re-run {_n(t.rerun_ms or 0.0)} ms: " + ("cached" if cached else "paid again"))
    if band_of(t.cold_excess_ms, t.bands) == "allocation":
        ev.append(f"the cold excess sits in the allocation band (<= {_n(t.alloc_hi_ms)} ms for fresh memory of "
                  "the op's inputs + output): allocator growth")
        return "allocator_growth", _join(ev)
    if cached is False:
        ev.append("above the allocation band yet paid again at a seen shape: a recurring cost or a disturbed "
                  "run, not a one-time cause")
        return "too_noisy", _join(ev)
    pays = shape_pays(t)
    per_shape = pays and (t.shape_excess_ms or 0.0) > max(t.alloc_hi_ms, t.shape_alloc_hi_ms or 0.0)
    if per_shape or (pays is None and family(op)):
        cause = compile_cause(op, device_type, library)
        ev.append(_compile_sentence(cause, op, device_type, asked=pays is not None, tuned=bool(library)))
        return cause, _join(ev)
    if pays is None:
        ev.append("paid on the op's first call and cached; whether new shapes pay again is unknown: runtime_init "
                  "assumed (paid once per process)")
    elif pays:
        ev.append("new shapes pay only within the allocation band: the rest of the cold excess is paid once per "
                  "process (runtime_init)")
    else:
        ev.append("new shapes of the warm op do not pay it again: paid once per process (runtime_init)")
    return "runtime_init", _join(ev)


def _shape_sentence(t: OpTiming) -> str:
    x = t.shape_excess_ms
    if x is None:
        return "no new shape of the op ran (the op refused every size change tried): the shape question could not be asked"
    firsts = ", ".join(_n(v.first_ms) for v in t.variants)
    return f"{len(t.variants)} new shape(s) of the warm op: first calls {firsts} ms, shape excess {_n(x)} ms"


def _compile_sentence(cause: str, op: str, device_type: str, asked: bool, tuned: bool = False) -> str:
    how = ("new shapes of the warm op pay above the allocation band too: keyed on shape" if asked
           else "the shape question could not be asked: named from the op family")
    if cause == Name.ALGORITHM_SELECTION and tuned:
        what = ("per-shape algorithm selection: " + ("cuDNN's find (cudnn.benchmark is on)" if library_of(op) == "conv"
                                                     else "TunableOp benchmarking GEMM kernels (PYTORCH_TUNABLEOP_ENABLED)"))
    elif cause == Name.ALGORITHM_SELECTION:
        what = "per-shape algorithm selection (the library choosing a kernel for the shape)"
    elif family(op):
        what = devices.of(device_type).library_build
    else:
        what = "a per-shape compile"
    return f"{how}; {cause} = {what}, read from the keying, not observed (no compiler or loader event was seen)"


def _join(ev: list[str]) -> str:
    return "; ".join(ev)


def _n(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"
