"""warmprof show: a saved report (trace or probe) in any registered output format (render/registry.py)."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError

NAME = "show"
HELP = "Show a saved report as text, or export it (--format, or the extension of -o FILE)."


def setup(parser: argparse.ArgumentParser) -> None:
    from .. import render

    parser.add_argument("report", help="a report saved by the --json of `warmprof trace`, `probe`, `watch`, `buckets` or `run`")
    parser.add_argument("--format", "-f", choices=render.formats(), default=None, help=_format_help())
    parser.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout (required for a binary format)")


def _format_help() -> str:
    from .. import render

    named = []
    for name in render.formats():
        f = render.find(name)
        notes = [f.about] if f.about else []
        notes += ["binary: needs -o"] if f.binary else []
        if not f.inferred:  # e.g. chrome: a .json file is the report's JSON
            taken = render.from_extension("x" + f.extension)
            notes += [f"only by --format{f', a {f.extension} file is {taken}' if taken else ''}"]
        named.append(f"{name} ({'; '.join(notes)})" if notes else name)
    by_extension = ", ".join(f"{f.extension} {f.name}" for f in map(render.find, render.formats()) if f.inferred)
    return f"{', '.join(named)}. Default: the one the extension of -o FILE names ({by_extension}), else text"


def chosen_format(fmt: str | None, output: str | None) -> str:
    """--format when given; else what the output file's extension names (x.png: png); else text."""
    from .. import render

    return fmt or (render.from_extension(output) if output else None) or "text"


def run(args: argparse.Namespace) -> int:
    from .. import render
    from ..report import load

    fmt = render.find(chosen_format(args.format, args.output))
    if fmt.binary and not args.output:
        # Bytes are never printed: to a terminal they are noise, and this keeps `show` one rule.
        raise InputError(f"--format {fmt.name} writes binary data, which is not printed to standard output: "
                         f"give a file with -o FILE{fmt.extension}")
    if args.output is not None:
        from ..system.output_paths import check_output_path

        check_output_path(args.output, "-o")
    report = load(args.report)
    renderer = render.get(fmt.name, render.kind_of(report))
    if not args.output:
        text = renderer.output(report)
        assert isinstance(text, str)  # a binary format was refused above without -o
        sys.stdout.write(text)  # text: control characters already made visible
        return 0
    from ..render.safe import safe_text

    path = renderer.write(report, args.output)  # rendered whole first: a failure leaves no half file
    print(f"wrote {safe_text(str(path))}", file=sys.stderr)
    return 0
