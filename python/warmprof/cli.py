"""warmprof's command line: small command objects (commands/), errors mapped to one-line messages."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from .errors import WarmprofError

# Set by a process warmprof started for itself (a trace's fresh child, its control process) once its
# work is out: `python -m warmprof` then ends with os._exit, skipping the interpreter's teardown
# (torch's is ~0.3 s a process) and whatever atexit handlers the model left (they are not part of a
# first request, and one that never returns would hold the finished trace).
_exit_now = False


def exit_without_teardown() -> None:
    """This process ends as soon as main() returns (see _exit_now); only for warmprof's own processes."""
    global _exit_now
    _exit_now = True


def end(code: int) -> None:
    """`python -m warmprof`'s exit: os._exit after a flush where exit_without_teardown() was called."""
    if _exit_now:
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


COMMANDS = ("trace", "probe", "compare", "show", "watch", "buckets")
TRACEBACK_HELP = ("on an error, also print its traceback, with the exception it came from (the model's own, "
                  "when the model raised) on stderr")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="warmprof",
        description="Why was the first pass slow? Attribute a model's first-pass excess to its causes.",
    )
    parser.add_argument("--version", action="version", version=f"warmprof {__version__}")
    parser.add_argument("--traceback", action="store_true", help=TRACEBACK_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f".commands.{name}", __package__)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.setup(p)
        # also after the command (`warmprof trace ... --traceback`); SUPPRESS keeps a global one given before it
        p.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS, help=TRACEBACK_HELP)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except WarmprofError as e:
        from .render.safe import safe_text

        if getattr(args, "traceback", False):
            # The chain first (the model's own exception, then warmprof's), the one line last.
            print(safe_text("".join(traceback.format_exception(e))), end="", file=sys.stderr)
        # One line, whatever the message quotes (a path or a name with control characters in it).
        print(f"warmprof: error: {safe_text(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("warmprof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    end(main())
