"""Op probes: the first-call fingerprint of a backend (filled in by the probes issue)."""
