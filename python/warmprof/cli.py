"""warmprof's command line: small command objects (commands/), errors mapped to one-line messages."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import WarmprofError

COMMANDS = ("trace", "probe", "compare", "show")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="warmprof",
        description="Why was the first pass slow? Attribute a model's first-pass excess to its causes.",
    )
    parser.add_argument("--version", action="version", version=f"warmprof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f".commands.{name}", __package__)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.setup(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except WarmprofError as e:
        from .render.safe import safe_text

        # One line, whatever the message quotes (a path or a name with control characters in it).
        print(f"warmprof: error: {safe_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("warmprof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
