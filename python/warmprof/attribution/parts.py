"""What attribution takes and produces: spans read off the timeline, the machine's unit costs, the
instruments' measured cost, and the parts of a pass (time of one cause and source, by module)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..stats import median


@dataclass(frozen=True)
class SpanRec:
    name: str
    cause: int
    start_ns: int
    end_ns: int
    thread: int
    depth: int
    value: int = 0
    closed: bool = True  # False: no end record (the pass raised); closed at the window end

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class Calibration:
    """Unit costs measured on this machine (estimates multiply counts by these). A cost of 0 is
    one not measured, or too spread to use (`unusable` says which, and why)."""

    fault_cost_ns: float = 0.0  # one first-touch fault of a small page (where no bytes are known)
    thread_start_ns: float = 0.0
    hook_cost_ns: float = 0.0  # what warmprof's module hooks add to one module call
    cupti_handler_ns: float = 0.0  # what warmprof's CUPTI handler adds to one callback (CUPTI's dispatch not included)
    # First touch of fresh anonymous memory, ns per byte at the sizes calibrated: ((bytes, ns), ...)
    # by size, small pages and huge pages (empty: none, e.g. THP "never").
    touch_ns_per_byte: tuple[tuple[int, float], ...] = ()
    huge_touch_ns_per_byte: tuple[tuple[int, float], ...] = ()
    huge_page_bytes: int = 2 << 20
    page_bytes: int = 4096
    # Mapping file pages already in the page cache: ns per byte, and faults per byte (the kernel
    # maps several pages a fault, "fault-around").
    file_ns_per_byte: float = 0.0
    file_faults_per_byte: float = 0.0
    # The op view's own first dispatch of an op (torch's per-op set-up for a Python dispatch mode),
    # measured on ops the model did not run (instruments/aten_ops.py): paid once per distinct op.
    op_view_cold_ns: float = 0.0
    unusable: Mapping[str, str] = field(default_factory=dict)  # calibration -> why it is not used


@dataclass(frozen=True)
class InstrumentCost:
    """What every instrument together cost one pass of this model, measured on it: a few steady
    passes run with every instrument on (as the first pass and the seen re-run) against the clean
    steady passes (see `compared`: their least disturbed passes, or their medians). `calls` holds
    each module's calls in one instrumented pass (the placement); `noise_ns` is the clean passes'
    noise band."""

    instrumented_ms: tuple[float, ...]
    clean_median_ms: float
    noise_ns: float = 0.0
    calls: Mapping[str, int] = field(default_factory=dict)
    # The clean passes' time at the quantile a low figure of len(instrumented_ms) passes sits at
    # (1 / (n + 1)); None: compare medians. A busy machine slows passes and never speeds them up,
    # so the least disturbed passes of each kind are compared, like for like in how many were run.
    clean_low_ms: float | None = None

    @property
    def instrumented_median_ms(self) -> float:
        return median(self.instrumented_ms) if self.instrumented_ms else 0.0

    @property
    def compared(self) -> tuple[str, float, float]:
        """(how, instrumented ms, clean ms): the two figures the difference is taken between."""
        if self.clean_low_ms is None or not self.instrumented_ms:
            return "median", self.instrumented_median_ms, self.clean_median_ms
        return "low", float(min(self.instrumented_ms)), self.clean_low_ms

    @property
    def per_pass_ns(self) -> float:
        """The measured difference per pass, never below 0."""
        _, instrumented, clean = self.compared
        return max(0.0, (instrumented - clean) * 1e6)

    @property
    def within_noise(self) -> bool:
        return self.per_pass_ns <= self.noise_ns


@dataclass(frozen=True)
class Figure:
    """A figure no span brackets, as an instrument gives it: a clock ramp inferred from clock samples,
    an MPS pipeline compile read off host-over-GPU time, the Metal driver's growth x a measured
    allocation. fills_unexplained: it may only take what the pass's other parts left unexplained
    (attribute_pass caps it there)."""

    cause: str
    source: str
    ms: float
    evidence: str = "inferred"
    module: str = ""
    count: int = 1
    detail: str = ""
    fills_unexplained: bool = False


@dataclass
class Part:
    """Attributed time of one (cause, source), with where it happened."""

    cause: str
    source: str
    evidence: str
    ns: float = 0.0
    count: int = 0
    by_module: dict[str, float] = field(default_factory=dict)
    detail: str = ""  # what the figure holds or leaves out, where a reader would otherwise guess
    # True: its time was taken out of cause spans' parts (which its estimator lowered by as much),
    # not out of the pass's free time; _assemble leaves it out of the unexplained time
    carved: bool = False
    # True: an inferred figure that may only take what the pass's other parts left unexplained
    # (an MPS pipeline compile read off host-over-GPU time, which other host-side causes share);
    # attribute_pass caps it there
    fills: bool = False
    # of `ns`, the time the thread waited for a CPU inside this part's own spans (cpu_contention says how
    # much): kept in the part's time, said beside it, never booked twice
    waited_ns: float = 0.0
    # of `ns`, the time the thread was blocked off the CPU inside this part's own spans (a compile waiting
    # for its compiler's processes): kept in the part's time, said beside it
    blocked_ns: float = 0.0

    @property
    def ms(self) -> float:
        return self.ns / 1e6

    @property
    def top_module(self) -> str:
        return max(self.by_module, key=self.by_module.__getitem__) if self.by_module else ""

    def add(self, module: str, ns: float) -> None:
        """Add `ns` of this part's time in `module`."""
        self.ns += ns
        self.by_module[module] = self.by_module.get(module, 0.0) + ns


@dataclass
class PassAttribution:
    pass_ms: float
    parts: list[Part]
    spans: list[SpanRec]
    faults: int = 0  # faults in the pass (minor + major)
    faults_outside_causes: int = 0
    own_faults: int = 0  # faults of warmprof's own buffers in the pass (not the model's)
    new_threads: int = 0
    off_thread_ms: float = 0.0
    unmatched: int = 0  # begins with no end (closed at the window end)
    # ns of the pass outside every cause span and not taken by an estimate, by innermost module
    # ("" outside modules): where this pass's unexplained time sits.
    unexplained_by_module: dict[str, float] = field(default_factory=dict)
    # The same by (module, op) site when the op view ran (op "" is the module's own code outside
    # ops); op_sites: each site's (index of its first op call in the pass, calls); op_calls: the
    # op spans in the pass, in call order (the op view's recorded calls line up with them).
    unexplained_by_site: dict[tuple[str, str], float] = field(default_factory=dict)
    op_sites: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    op_calls: int = 0

    @property
    def attributed_ms(self) -> float:
        return sum(p.ms for p in self.parts)

    def attributed_by_cause(self, cause: str) -> float:
        """ms of the parts of one cause."""
        return sum(p.ms for p in self.parts if p.cause == cause)

    def by_module(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for p in self.parts:
            for mod, ns in p.by_module.items():
                d = out.setdefault(mod, {})
                d[p.cause] = d.get(p.cause, 0.0) + ns / 1e6
        return out
