"""warmprof probe: a backend's first-call fingerprint at never-seen shapes, with calibrated bands."""

from __future__ import annotations

import argparse

NAME = "probe"
HELP = "Probe matmul/softmax/elementwise at never-seen shapes: compile, allocation or launch tax?"


def setup(parser: argparse.ArgumentParser) -> None:
    from ..probes.ops import OPS

    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default cpu)")
    parser.add_argument("--backend", default="eager", help="eager, compile (torch.compile, cpu/cuda) or cupy (cuda)")
    parser.add_argument("--ops", nargs="+", default=list(OPS), metavar="OP", help=f"ops to probe (default: {' '.join(OPS)})")
    parser.add_argument("-K", type=int, default=20, help="distinct sequence lengths in the bucketing sweep (default 20)")
    parser.add_argument("-B", type=int, default=4, help="buckets the K lengths are padded to (default 4)")
    parser.add_argument("--shapes-per-op", type=int, default=4, metavar="N", help="never-seen shapes per op (default 4)")
    parser.add_argument("--steady-calls", type=int, default=20, metavar="N", help="timed steady calls per shape (default 20)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), float16, bfloat16")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="torch.set_num_threads(N) while probing")
    parser.add_argument("--cache", choices=("fresh", "keep"), default="fresh",
                        help="compile caches: fresh empty dirs per experiment (cold, default) or the user's own")
    parser.add_argument("--json", metavar="PATH", help="also save the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    from ..probes import probe
    from .paths import check_output_path, save_and_print

    if args.json is not None:
        check_output_path(args.json)
    report = probe(
        args.ops, device=args.device, backend=args.backend, K=args.K, B=args.B, shapes_per_op=args.shapes_per_op,
        steady_calls=args.steady_calls, dtype=args.dtype, threads=args.threads, cold_cache=args.cache == "fresh",
        progress=not args.quiet,
    )
    return save_and_print(report, args.json)
