"""warmprof show: a saved report (trace or probe) as text, JSON, a Chrome/Perfetto trace or a PNG."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError, ReportError

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
    r = renderer(args.format)
    if r is None:
        text = str(report)
        text = text if text.endswith("\n") else text + "\n"
        if args.output:
            try:
                with open(args.output, "w") as f:
                    f.write(text)
            except OSError as e:
                raise ReportError(f"{args.output}: cannot write ({e.strerror or e})") from e
        else:
            sys.stdout.write(text)
        return 0
    if args.output:
        path = r.write(report, args.output)
        print(f"wrote {path}", file=sys.stderr)
    else:
        out = r.render(report)
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
    return 0
