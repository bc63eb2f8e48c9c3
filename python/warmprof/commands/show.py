"""warmprof show: a saved report (trace or probe) as text, JSON, a Chrome/Perfetto trace or a PNG."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError
from ..fileio import write_output

NAME = "show"
HELP = "Show a saved report as text, or export it (--format json|chrome|png)."
FORMATS = ("text", "json", "chrome", "png")


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", help="a report saved by `warmprof trace --json` or `warmprof probe --json`")
    parser.add_argument("--format", "-f", choices=FORMATS, default="text",
                        help="text (default), json, chrome (trace-event JSON for Perfetto or chrome://tracing), png")
    parser.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout (required for png)")


def renderer(fmt: str):
    if fmt == "json":
        from ..render.json import JsonRenderer

        return JsonRenderer()
    if fmt == "chrome":
        from ..render.chrome import ChromeTraceRenderer

        return ChromeTraceRenderer()
    if fmt == "png":
        from ..render.png import PngRenderer

        return PngRenderer()
    return None


def run(args: argparse.Namespace) -> int:
    from ..report import load

    if args.format == "png" and not args.output:
        raise InputError("--format png writes an image: give a file with -o FILE.png")
    if args.output is not None:
        from .paths import check_output_path

        check_output_path(args.output, "-o")
    report = load(args.report)
    out = _render(args.format, report)
    if not args.output:
        sys.stdout.write(out)
        return 0
    from ..render.safe import safe_text

    path = write_output(args.output, out)
    print(f"wrote {safe_text(str(path))}", file=sys.stderr)
    return 0


def _render(fmt: str, report) -> str | bytes:
    """The whole output, rendered before anything is written: a failure leaves no half file."""
    r = renderer(fmt)
    out = str(report) if r is None else r.render(report)  # str(): control characters already made visible
    if isinstance(out, str) and not out.endswith("\n"):
        out += "\n"
    return out
