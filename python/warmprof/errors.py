"""The WarmprofError hierarchy: every refusal a user can meet, each with one clear line."""

from __future__ import annotations


class WarmprofError(Exception):
    """Base of every error warmprof raises on purpose. The CLI prints it as one line."""

    exit_code = 2


class InputError(WarmprofError):
    """A bad model, shape, dtype, input or option."""


class DeviceError(WarmprofError):
    """An unknown device, or one that is not present on this machine."""

    exit_code = 3


class ModelError(WarmprofError):
    """The model raised; its own exception is chained as __cause__."""

    exit_code = 4


class ReportError(WarmprofError):
    """A report file that is corrupt, foreign, or of a kind this command cannot use."""

    exit_code = 5


class BackendError(WarmprofError):
    """A native backend (CUPTI, CUDA events) that cannot be used here."""

    exit_code = 6


class TimedOut(WarmprofError):
    """A command ran past its --timeout and was stopped (what it started with it); exit 124, as
    timeout(1) ends. The message says what it was doing and what was written; `report` holds what
    was gathered before it (a --repeat's finished runs), or None."""

    exit_code = 124

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class NotWarmError(WarmprofError):
    """assert_warm: a call at a warmed shape still paid a one-time cost (a compile, allocator growth...).

    `result` holds the check's rows (warm.WarmupResult); the message names each shape and cause."""

    exit_code = 7

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result
