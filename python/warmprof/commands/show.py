"""warmprof show: not yet available in this build."""

from __future__ import annotations

import argparse
import sys

NAME = "show"
HELP = "(show: not yet available)"


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs="*")


def run(args: argparse.Namespace) -> int:
    print("warmprof show: not yet available in this build", file=sys.stderr)
    return 1
