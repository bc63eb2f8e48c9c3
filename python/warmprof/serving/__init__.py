"""Serving: what a service does with a model once it is up. `watch/` (warmprof.watch: which cause made a
live call slow), `warmup.py` (warmprof.warmup / assert_warm: pay the one-time costs before traffic, and
prove it), `buckets.py` (warmprof.plan_buckets: the padding buckets that cost least)."""
