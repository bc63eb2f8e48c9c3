"""warmprof compare: two or more saved reports side by side, largest change first."""

from __future__ import annotations

import argparse
import sys

NAME = "compare"
HELP = "Compare saved reports (trace with trace, probe with probe, run with run): which cause, op or phase moved."
# The files a comparison can also be written to: option, output format (render/registry.py), help.
OUTPUTS = (("--png", "png", "also draw the comparison as grouped bars into FILE"),
           ("--json", "json", "also write the comparison as JSON into FILE"))


def setup(parser: argparse.ArgumentParser) -> None:
    # "*", not "+": a --label before the reports takes them as names too, and _names() gives them back.
    parser.add_argument("reports", nargs="*", metavar="REPORT", help="two or more saved reports; the first is the baseline")
    parser.add_argument("--label", action="extend", nargs="+", metavar="NAME",
                        help="a name per report, in order: several after one --label (`--label a b`), or one per "
                             "--label (default: the file names)")
    for option, _, what in OUTPUTS:
        parser.add_argument(option, metavar="FILE", help=what)


def run(args: argparse.Namespace) -> int:
    from .. import render
    from ..report.comparison import compare
    from ..system.output_paths import check_output_path

    paths = {option: getattr(args, option.lstrip("-")) for option, _, _ in OUTPUTS}
    for option, path in paths.items():
        if path is not None:
            check_output_path(path, option)
    labels, reports = _names(args.label, args.reports)
    comparison = compare(*reports, labels=labels)
    # warmprof.system.fileio's policy, like every output; each file is rendered whole before it is written.
    written = [render.get(fmt, "comparison").write(comparison, paths[option]) for option, fmt, _ in OUTPUTS if paths[option]]
    sys.stdout.write(str(comparison))  # the "text" format: control characters already made visible
    from ..render.safe import safe_text

    for path in written:
        print(f"wrote {safe_text(str(path))}", file=sys.stderr)
    return 0


def _names(labels: list[str] | None, reports: list[str]) -> tuple[list[str] | None, list[str]]:
    """The labels and the reports, one label per report. `--label a b` takes every word after it,
    so in `compare --label a b x.json y.json` (or `--label a --label b x.json y.json`) the reports
    end up among the labels: as there is one label per report, the second half of the words are
    the reports that followed the last --label. A count that cannot be split so is left for
    compare() to refuse, naming both counts."""
    if labels and not reports and len(labels) % 2:
        from ..errors import InputError

        raise InputError(f"--label took {len(labels)} words and no report followed: give one name per report, with "
                         "the reports before --label (`compare a.json b.json --label a b`) or as many names as reports")
    if not labels or len(labels) <= len(reports) or (len(labels) + len(reports)) % 2:
        return labels, reports
    n = (len(labels) + len(reports)) // 2
    return labels[:n], reports + labels[n:]
