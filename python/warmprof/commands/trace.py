"""warmprof trace: placeholder until the trace issue lands."""

from __future__ import annotations

import argparse
import sys

NAME = "trace"
HELP = "Trace a model's first pass and attribute its excess to causes."


def setup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?")
    parser.add_argument("--demo", action="store_true")


def run(args: argparse.Namespace) -> int:
    print("warmprof trace: not yet available", file=sys.stderr)
    return 1
