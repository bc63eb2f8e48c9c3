"""The bucket planner's time against distinct lengths (issue 26: it was quadratic, 18.5 s at 16,000
distinct lengths and about 21 minutes at a 128k context; the goal is a 128k-distinct-length plan in under
2 s). Uniform lengths 1..N, a compile of 9.6 s and 0.01 ms a padded token (a served model's figures).

    python bench/buckets_scale.py [--sizes 16000,32000,64000,128000]

Prints a table and the ratio of each time to the smallest size's, against the size ratio: near-linear
(O(n log n)) reads about the size ratio, quadratic its square."""

from __future__ import annotations

import argparse
import time

from warmprof.serving.buckets import plan_buckets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="16000,32000,64000,128000")
    sizes = [int(x) for x in ap.parse_args().sizes.split(",")]
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        plan = plan_buckets(list(range(1, n + 1)), compile_ms=9600.0, per_token_ms=0.01)
        rows.append((n, time.perf_counter() - t0, len(plan.boundaries)))
    print(f"{'distinct':>9} {'seconds':>8} {'buckets':>8} {'time ratio':>11} {'size ratio':>11}")
    for n, s, b in rows:
        print(f"{n:>9} {s:>8.2f} {b:>8} {s / rows[0][1]:>11.1f} {n / rows[0][0]:>11.1f}")


if __name__ == "__main__":
    main()
