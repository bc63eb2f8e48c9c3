"""Op probes: the first-call fingerprint of a backend, with bands calibrated on the machine.

`probe()` runs matmul, softmax and elementwise at never-seen shapes (first call vs steady, a
seen-shape re-run, matched-output-size pairs) and a bucketing sweep, and judges each op and shape
as compile, one-time load, allocation, launch or none (or too noisy to call). See api.probe.
"""

from .api import probe
from .ops import OPS

__all__ = ["OPS", "probe"]
