"""warmprof probe: a backend's first-call fingerprint at never-seen shapes, with calibrated bands;
or any aten op (--ops conv2d,layer_norm), or a traced model's own ops (--from R.json), each in a
fresh process."""

from __future__ import annotations

import argparse

from ..errors import InputError

NAME = "probe"
HELP = ("Probe ops at never-seen shapes: matmul/softmax/elementwise (compile, allocation or launch tax?), "
        "any aten op (--ops conv2d,layer_norm:64x128), or a trace's own ops (--from R.json)")


def setup(parser: argparse.ArgumentParser) -> None:
    from ..probes.ops import OPS

    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default cpu; with --from the trace's)")
    parser.add_argument("--backend", default="eager", help="eager, compile (torch.compile, cpu/cuda) or cupy (cuda)")
    parser.add_argument("--ops", nargs="+", default=None, metavar="OP",
                        help=f"ops to probe, comma or space separated (default: {' '.join(OPS)}). {', '.join(OPS)} run "
                             "the built-in probe; any other name is an aten op, probed in a fresh process, optionally "
                             "with its main input's shape (layer_norm:64x128, conv2d:8x3x64x64)")
    parser.add_argument("--from", dest="from_report", metavar="R.json",
                        help="probe the op calls of a trace report saved with the op view (warmprof trace --explain "
                             "--json R.json), the largest unattributed first")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="with --from: the N largest distinct op calls (default 5)")
    parser.add_argument("--op-timeout", type=float, default=120.0, metavar="S",
                        help="aten ops: seconds one op's fresh process may take before it is killed and becomes a "
                             "failed row (default 120)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S",
                        help="stop the whole probe (and the processes it started) after S seconds, with exit code "
                             "124; nothing is written (default: no limit)")
    parser.add_argument("-K", type=int, default=20, help="distinct sequence lengths in the bucketing sweep (default 20)")
    parser.add_argument("-B", type=int, default=4, help="buckets the K lengths are padded to (default 4)")
    parser.add_argument("--shapes-per-op", type=int, default=4, metavar="N", help="never-seen shapes per op (default 4)")
    parser.add_argument("--steady-calls", type=int, default=20, metavar="N", help="timed steady calls per shape (default 20)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), float16, bfloat16")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch.set_num_threads(N) while probing (with --from: the trace's by default)")
    parser.add_argument("--cache", choices=("fresh", "keep"), default="fresh",
                        help="compile caches: fresh empty dirs per experiment (cold, default) or the user's own")
    parser.add_argument("--json", metavar="PATH", help="also save the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def split_ops(ops: list[str] | None) -> tuple[list[str], list[str]]:
    """(built-in probe names, aten op names) from --ops; mixing the two is refused."""
    from ..probes.aten_table import split_names
    from ..probes.ops import OPS

    names = split_names(ops or [])
    builtin = [n for n in names if n in OPS]
    aten = [n for n in names if n not in OPS]
    if builtin and aten:
        raise InputError(f"--ops mixes the built-in probe ({', '.join(builtin)}) with aten ops ({', '.join(aten)}): "
                         "run them as two `warmprof probe` commands (or name the aten op, e.g. aten.matmul)")
    return builtin, aten


def run(args: argparse.Namespace) -> int:
    from ..system.output_paths import check_output_path, save_and_print

    if args.json is not None:
        check_output_path(args.json)
    builtin, aten = split_ops(args.ops)
    if args.from_report is not None or aten:
        report = _aten(args, aten)
    else:
        from ..probes import OPS, probe

        report = probe(
            builtin or OPS, device=args.device or "cpu", backend=args.backend, K=args.K, B=args.B,
            shapes_per_op=args.shapes_per_op, steady_calls=args.steady_calls, dtype=args.dtype, threads=args.threads,
            cold_cache=args.cache == "fresh", progress=not args.quiet,
        )
    return save_and_print(report, args.json)


def _aten(args: argparse.Namespace, aten: list[str]):
    from ..probes.aten import probe_from, probe_ops

    if not 1 <= args.op_timeout <= 86400:  # also refused by probe_ops, named there as its timeout_s
        raise InputError(f"--op-timeout {args.op_timeout:g}: give seconds from 1 to 86400")

    if args.backend != "eager":
        raise InputError(f"aten ops are probed eager (torch, a fresh process per op), not with --backend {args.backend}")
    if args.from_report is not None:
        if aten:
            raise InputError("give either --from R.json (the trace's own ops) or --ops NAMES, not both")
        return probe_from(args.from_report, top=args.top, device=args.device, threads=args.threads,
                          progress=not args.quiet, timeout_s=args.op_timeout)
    return probe_ops(aten, device=args.device or "cpu", threads=args.threads, progress=not args.quiet,
                     timeout_s=args.op_timeout, dtype=args.dtype)
