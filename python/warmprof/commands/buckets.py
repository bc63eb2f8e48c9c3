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
        "padding, against one bucket per length and one bucket (costs given, or from a probe, watch or trace report)")


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
    parser.add_argument("--from-watch", metavar="W.json",
                        help="the costs not given measured on the model from a watch report (warmprof watch --json "
                             "W.json, or Watcher.report().save()): its first calls' compiles and its keys' latency per "
                             "length; the lengths too, from its keys' calls, unless given; and the compile model its "
                             "keys showed")
    parser.add_argument("--from-trace", metavar="R.json",
                        help="the costs not given measured on the model from a trace report (warmprof trace --json "
                             "R.json): its first pass's compile causes and its steady pass per token of the traced "
                             "shape's last dimension; give the lengths")
    parser.add_argument("--compiles", choices=("static", "automatic"), default=None,
                        help="how many compiles a plan pays: static, one per bucket (torch.compile(dynamic=False), CUDA "
                             "graphs); automatic, two at most (torch.compile's default automatic dynamic shapes). "
                             "Default: what --from-watch's keys showed, else static")
    parser.add_argument("--max-buckets", type=int, metavar="N", help="at most N buckets (default: no cap)")
    parser.add_argument("--json", metavar="PATH", help="also write the plan as JSON")


def run(args: argparse.Namespace) -> int:
    from ..render.safe import safe_text
    from ..serving.buckets import costs_from_probe, costs_from_trace, costs_from_watch, plan_buckets
    from ..system.output_paths import check_output_path

    if args.json is not None:
        check_output_path(args.json)
    sources = [(o, v) for o, v in (("--from-probe", args.from_probe), ("--from-watch", args.from_watch),
                                   ("--from-trace", args.from_trace)) if v is not None]
    if len(sources) > 1:
        raise InputError(f"give one source of costs, not {' and '.join(o for o, _ in sources)}")
    measured = None
    if args.from_watch is not None:
        measured = costs_from_watch(args.from_watch, compile_ms=args.compile_ms, per_token_ms=args.per_token_ms,
                                    need_lengths=args.lengths is None and args.lengths_file is None)
    elif args.from_trace is not None:
        measured = costs_from_trace(args.from_trace, compile_ms=args.compile_ms, per_token_ms=args.per_token_ms)
    if measured is not None and measured.lengths is not None and args.lengths is None and args.lengths_file is None:
        lengths: Any = measured.lengths
        lengths_how = measured.lengths_how
    else:
        lengths, lengths_how = _lengths(args), ""
    probe_costs: Any = None
    if args.from_probe is not None:
        probe_costs = costs_from_probe(args.from_probe, compile_ms=args.compile_ms, per_token_ms=args.per_token_ms)
        compile_ms, per_token_ms = probe_costs.compile_ms, probe_costs.per_token_ms
    elif measured is not None:
        probe_costs = measured
        compile_ms, per_token_ms = measured.compile_ms, measured.per_token_ms
    elif args.compile_ms is None or args.per_token_ms is None:
        missing = " and ".join(o for o, v in (("--compile-ms", args.compile_ms), ("--per-token-ms", args.per_token_ms))
                               if v is None)
        raise InputError(f"give {missing}, or --from-probe P.json, --from-watch W.json or --from-trace R.json to "
                         f"estimate {'them' if ' and ' in missing else 'it'} from a report")
    else:
        compile_ms, per_token_ms = args.compile_ms, args.per_token_ms
    compiles = args.compiles or (measured.compiles if measured is not None else "static")
    compiles_how = ("given (--compiles)" if args.compiles else measured.compiles_how if measured is not None
                    else "static (the default)")
    plan = plan_buckets(lengths, compile_ms=compile_ms, per_token_ms=per_token_ms, max_buckets=args.max_buckets,
                        compiles=compiles)
    text = str(plan)
    source = next((str(v) for _, v in sources), "")
    if probe_costs is not None:
        said = "estimated from" if args.from_probe is not None else "measured on the model, from"
        text += (f"\nCosts {said} " + safe_text(source) + "\n"
                 f"  compile_ms: {probe_costs.compile_how}\n  per_token_ms: {probe_costs.per_token_how}\n")
    if lengths_how:
        text += f"  lengths: {lengths_how}\n"
    if measured is not None or args.compiles:
        text += f"  compiles: {compiles_how}\n"
    written = None
    if args.json is not None:
        from ..system.fileio import write_output

        data: dict[str, Any] = plan.to_dict()
        data["costs_from"] = ({sources[0][0].removeprefix("--from-"): source, **probe_costs.to_dict()}
                              if probe_costs is not None else "given")
        if isinstance(data["costs_from"], dict) and not lengths_how:  # the lengths were the caller's, not the report's
            data["costs_from"].pop("lengths", None)
            data["costs_from"].pop("lengths_how", None)
        data["compiles_how"] = compiles_how
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
