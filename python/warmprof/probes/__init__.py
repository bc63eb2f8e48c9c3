"""Op probes: a backend's first-call fingerprint at never-seen shapes, with bands calibrated on the
machine (`probe()`: api.py; the method: README, How it measures)."""

from .api import probe
from .ops import OPS

__all__ = ["OPS", "probe"]
