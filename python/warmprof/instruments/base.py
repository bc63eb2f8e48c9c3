"""The instrument protocol: a context manager that turns one runtime's own signal into recorder events.

Rules every instrument keeps:
- __enter__ installs hooks/flags/subscriptions; __exit__ removes every one of them, even when the
  model raised (the trace runs instruments in an ExitStack).
- `reason` is set (and __enter__ does nothing) when the source is not available here; the report
  lists it, so a missing source is said, never silently dropped.
- The trace calls mark_pass(name) before each instrumented pass, before_sync(name) once the pass
  has queued its work and before the host waits for the device, and end_pass(name) after.
- span_evidence names the sources whose spans are not a measurement of the cause alone.
- summary() returns plain JSON data for report["instruments"][name] (counts, cache hits, notes);
  it may also put lines in `notes` for the text report.
"""

from __future__ import annotations

from typing import Any

from ..attribution.parts import Figure


class Instrument:
    name = "instrument"
    # Evidence of this instrument's spans, by span source, where it is not "measured" (the span
    # brackets more than the cause, and the cause is read from a fingerprint): e.g. {"cudnn": "inferred"}.
    span_evidence: dict[str, str] = {}

    def __init__(self) -> None:
        self.reason: str = ""  # non-empty: not available, with why
        self.notes: list[str] = []
        self.current_pass: str = ""  # the pass being run, kept by mark_pass

    @property
    def available(self) -> bool:
        return not self.reason

    def __enter__(self) -> "Instrument":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def mark_pass(self, name: str) -> None:
        """Called by the trace at the start of each instrumented pass ("first", "seen_rerun").

        Overrides call super().mark_pass(name) first, so current_pass is always the running pass.
        """
        self.current_pass = name

    def before_sync(self, name: str) -> None:
        """Called by the trace when the pass's work is queued, before the device sync (not when the
        model raised): where a device-side end mark (a CUDA event) goes."""

    def end_pass(self, name: str) -> None:
        """Called by the trace at the end of each instrumented pass, after the device sync."""

    def inferred(self, pass_name: str) -> list[Figure]:
        """Figures not bracketed by spans (a clock ramp), typed: attribution.Figure."""
        return []

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"active": self.available}
        if self.reason:
            out["reason"] = self.reason
        if self.notes:
            out["notes"] = list(self.notes)
        return out
