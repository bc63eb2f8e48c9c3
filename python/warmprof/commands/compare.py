"""warmprof compare: two or more saved reports side by side, largest change first."""

from __future__ import annotations

import argparse
import sys

NAME = "compare"
HELP = "Compare saved reports (trace with trace, probe with probe): which cause or op moved."


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT", help="two or more saved reports; the first is the baseline")
    parser.add_argument("--label", action="append", metavar="NAME",
                        help="a name per report, in order (default: the file names)")
    parser.add_argument("--png", metavar="FILE", help="also draw the comparison as grouped bars into FILE")
    parser.add_argument("--json", metavar="FILE", help="also write the comparison as JSON into FILE")


def run(args: argparse.Namespace) -> int:
    from ..comparison import compare
    from .paths import check_output_path

    for option, path in (("--png", args.png), ("--json", args.json)):
        if path is not None:
            check_output_path(path, option)
    comparison = compare(*args.reports, labels=args.label)
    written = []
    if args.png:
        from ..render.png import PngRenderer

        written.append(PngRenderer().write(comparison, args.png))  # warmprof.fileio's policy, like every output
    if args.json:
        from ..render.json import JsonRenderer

        written.append(JsonRenderer().write(comparison, args.json))
    sys.stdout.write(str(comparison))  # CompareTextRenderer: control characters already made visible
    from ..render.safe import safe_text

    for path in written:
        print(f"wrote {safe_text(str(path))}", file=sys.stderr)
    return 0
