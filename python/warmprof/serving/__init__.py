"""Serving: what a service does with a model once it is up (watch, warm-up, bucket plans; README, Layout)."""
