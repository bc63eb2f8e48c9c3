"""warmprof compare: two or more saved reports side by side, largest change first."""

from __future__ import annotations

import argparse
import sys

NAME = "compare"
HELP = "Compare saved reports (trace with trace, probe with probe): which cause or op moved."
# The files a comparison can also be written to: option, output format (render/registry.py), help.
OUTPUTS = (("--png", "png", "also draw the comparison as grouped bars into FILE"),
           ("--json", "json", "also write the comparison as JSON into FILE"))


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT", help="two or more saved reports; the first is the baseline")
    parser.add_argument("--label", action="append", metavar="NAME",
                        help="a name per report, in order (default: the file names)")
    for option, _, what in OUTPUTS:
        parser.add_argument(option, metavar="FILE", help=what)


def run(args: argparse.Namespace) -> int:
    from .. import render
    from ..comparison import compare
    from .paths import check_output_path

    paths = {option: getattr(args, option.lstrip("-")) for option, _, _ in OUTPUTS}
    for option, path in paths.items():
        if path is not None:
            check_output_path(path, option)
    comparison = compare(*args.reports, labels=args.label)
    # warmprof.fileio's policy, like every output; each file is rendered whole before it is written.
    written = [render.get(fmt, "comparison").write(comparison, paths[option]) for option, fmt, _ in OUTPUTS if paths[option]]
    sys.stdout.write(str(comparison))  # the "text" format: control characters already made visible
    from ..render.safe import safe_text

    for path in written:
        print(f"wrote {safe_text(str(path))}", file=sys.stderr)
    return 0
