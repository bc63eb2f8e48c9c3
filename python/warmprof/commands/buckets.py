"""warmprof buckets: the padding buckets that cost least in compiles plus padding, for observed request
lengths, against one bucket per length and one bucket."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ..errors import InputError

NAME = "buckets"
HELP = ("Plan padding buckets for observed request lengths: the boundaries that cost least in compiles plus "
        "padding, against one bucket per length and one bucket (costs given, or from a probe report)")


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", action="extend", nargs="+", metavar="N",
                        help="the observed request lengths, repeats included (the distribution), comma or space "
                             "separated: --lengths 17,29,29,64")
    parser.add_argument("--lengths-file", metavar="FILE",
                        help="the lengths from a file: integers one per line (or comma separated; blank lines and "
                             "# comments skipped), a JSON list of them, or a JSON object {\"length\": count}")
    parser.add_argument("--compile-ms", type=float, metavar="X", help="what a bucket costs once, its first call (ms)")
    parser.add_argument("--per-token-ms", type=float, metavar="Y", help="what one padded token costs (ms)")
    parser.add_argument("--from-probe", metavar="P.json",
                        help="estimate the costs not given from a probe report (warmprof probe --json P.json)")
    parser.add_argument("--max-buckets", type=int, metavar="N", help="at most N buckets (default: no cap)")
    parser.add_argument("--json", metavar="PATH", help="also write the plan as JSON")


def run(args: argparse.Namespace) -> int:
    from ..render.safe import safe_text
    from ..serving.buckets import costs_from_probe, plan_buckets
    from ..system.output_paths import check_output_path

    if args.json is not None:
        check_output_path(args.json)
    lengths = _lengths(args)
    probe_costs = None
    if args.from_probe is not None:
        probe_costs = costs_from_probe(args.from_probe, compile_ms=args.compile_ms, per_token_ms=args.per_token_ms)
        compile_ms, per_token_ms = probe_costs.compile_ms, probe_costs.per_token_ms
    elif args.compile_ms is None or args.per_token_ms is None:
        missing = " and ".join(o for o, v in (("--compile-ms", args.compile_ms), ("--per-token-ms", args.per_token_ms))
                               if v is None)
        raise InputError(f"give {missing}, or --from-probe P.json to estimate "
                         f"{'them' if ' and ' in missing else 'it'} from a probe report")
    else:
        compile_ms, per_token_ms = args.compile_ms, args.per_token_ms
    plan = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms, max_buckets=args.max_buckets)
    text = str(plan)
    if probe_costs is not None:
        text += ("\nCosts estimated from " + safe_text(args.from_probe) + "\n"
                 f"  compile_ms: {probe_costs.compile_how}\n  per_token_ms: {probe_costs.per_token_how}\n")
    written = None
    if args.json is not None:
        from ..system.fileio import write_output

        data: dict[str, Any] = plan.to_dict()
        data["costs_from"] = ({"probe": args.from_probe, **probe_costs.to_dict()} if probe_costs is not None
                              else "given")
        written = write_output(args.json, json.dumps(data, indent=2, allow_nan=False) + "\n")
    sys.stdout.write(text)
    if written is not None:
        print(f"wrote {safe_text(str(written))}", file=sys.stderr)
    return 0


def _lengths(args: argparse.Namespace) -> Any:
    if (args.lengths is None) == (args.lengths_file is None):
        raise InputError("give the request lengths: --lengths 17,29,29,64 or --lengths-file FILE (one of the two)")
    if args.lengths is not None:
        return _integers(" ".join(args.lengths), "--lengths")
    return _read_lengths_file(args.lengths_file)


def _integers(text: str, where: str) -> list[int]:
    out = []
    for word in re.split(r"[\s,]+", text.strip()):
        if not word:
            continue
        try:
            out.append(int(word))
        except ValueError:
            from ..render.safe import one_line

            raise InputError(f"{where}: {one_line(word[:40])!r} is not an integer length") from None
    return out


def _read_lengths_file(path: str) -> Any:
    from ..errors import ReportError
    from ..system.fileio import read_regular

    try:
        data = read_regular(path)  # a FIFO or a device is refused, never waited on
    except ReportError as e:
        raise InputError(f"--lengths-file {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--lengths-file {path}: not UTF-8 text") from None
    if text.lstrip().startswith(("[", "{")):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InputError(f"--lengths-file {path}: invalid JSON ({e})") from None
        if isinstance(value, dict):
            return {_json_key(k, path): v for k, v in value.items()}
        return value  # a list: plan_buckets checks every entry
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    return _integers(" ".join(lines), f"--lengths-file {path}")


def _json_key(key: str, path: str) -> int:
    try:
        return int(key)
    except ValueError:
        from ..render.safe import one_line

        raise InputError(f"--lengths-file {path}: key {one_line(key[:40])!r} is not an integer length") from None
