"""warmprof's command line: small command objects (commands/), errors mapped to one-line messages."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from .errors import InputError, TimedOut, WarmprofError

# Set by a process warmprof started for itself (a trace's fresh child, its control process) once its
# work is out: `python -m warmprof` then ends with os._exit, skipping the interpreter's teardown
# (torch's is ~0.3 s a process) and whatever atexit handlers the model left (they are not part of a
# first request, and one that never returns would hold the finished trace).
_exit_now = False


def exit_without_teardown() -> None:
    """This process ends as soon as main() returns (see _exit_now), and what the model started ends
    with it; only for warmprof's own processes. From now on a helper that detaches itself stays
    below this process (supervise.adopt_orphans), so end() finds it."""
    from .system.supervise import adopt_orphans

    global _exit_now
    _exit_now = True
    adopt_orphans()


def end(code: int) -> None:
    """`python -m warmprof`'s exit. Where exit_without_teardown() was called: the processes the model
    left running are stopped (a helper holding this process's stdout would keep a `| cat` reading for
    its whole life), then os._exit after a flush."""
    if _exit_now:
        import os

        from .instruments.fd_capture import helper_pids
        from .system.supervise import stop_descendants

        _flush_streams()
        left = stop_descendants(own=helper_pids())
        if left:
            shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
            _say(f"warmprof: stopped {len(left)} process{'es' if len(left) > 1 else ''} the model left running: {shown}")
        os._exit(code)
    sys.exit(code)


def _flush_streams() -> None:
    """stdout and stderr flushed before an os._exit, whatever happened to them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _say(line: str) -> None:
    """One line on stderr, whatever happened to sys.stderr."""
    import os

    from .render.safe import safe_text

    try:
        os.write(2, (safe_text(line) + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


MAX_TIMEOUT_S = 7 * 24 * 3600.0  # --timeout: a week at most (a typo is not a week)
COMMANDS = ("trace", "run", "probe", "compare", "show", "watch", "buckets")
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
    from .system.progress import stderr_or_null

    stderr_or_null()  # `2>&-`: /dev/null at fd 2 first, so nothing meant for stderr reaches stdout
    try:
        return _main(argv)
    except (KeyboardInterrupt, Exception) as e:  # Ctrl-C anywhere, the imports included (before them: system/launch.py)
        if not _an_interrupt(e):
            raise
        from .system.launch import INTERRUPTED, is_command_line

        ending = is_command_line()
        if ending:  # deciding to end: a second Ctrl-C (or one the unraisable hook raises again) must not cut this short
            import signal

            signal.signal(signal.SIGINT, signal.SIG_IGN)
        lost = "" if _in_chain(e) else f" (what it landed in then raised {_one_line(e)})"
        if not isinstance(e, KeyboardInterrupt) and "--traceback" in (sys.argv if argv is None else argv):
            _print_traceback(e)
        _say("warmprof: interrupted" + lost)
        if ending:
            # Out now, 130: a KeyboardInterrupt that went through code exec() ran (dataclasses makes each
            # class's methods so: Ctrl-C during an import) sets CPython's "unhandled KeyboardInterrupt" flag
            # even when caught, and the interpreter would end itself with SIGINT after main() returned.
            import os

            _flush_streams()
            os._exit(INTERRUPTED)
        return INTERRUPTED


def _print_traceback(e: BaseException) -> None:
    """--traceback: the chain first (the model's own exception, then warmprof's), printable whatever it holds."""
    from .render.safe import safe_text

    print(safe_text("".join(traceback.format_exception(e))), end="", file=sys.stderr)


def _one_line(e: BaseException) -> str:
    """`Type: the first line of its message`, printable whatever the message holds (or its __str__ does)."""
    from .render.safe import safe_text

    try:
        said = (str(e).strip().splitlines() or [""])[0][:200]
    except Exception:  # a broken __str__
        said = "(its message could not be read)"
    return safe_text(f"{type(e).__name__}: {said}")


def _an_interrupt(e: BaseException) -> bool:
    """A Ctrl-C, or an error it caused: a KeyboardInterrupt raised inside a class body's __set_name__ (an
    import that inductor's compile made) comes out as RuntimeError, wrapped again by inductor, with the
    interrupt in its chain of causes; where the code it landed in lost it from the chain, the SIGINT's own
    mark (launch.interrupt_seen) says it."""
    from .system.launch import interrupt_seen

    return interrupt_seen() or _in_chain(e)


def _in_chain(e: BaseException) -> bool:
    """A KeyboardInterrupt in e's chain of causes and contexts."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def _main(argv: list[str] | None) -> int:
    from .system.launch import started

    started()  # from here on Ctrl-C is main()'s KeyboardInterrupt, said in one line
    from .system.output_paths import hold_stdout
    from .system.supervise import Deadline, deadline

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        timeout = getattr(args, "timeout", None)
        if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_S:
            raise InputError(f"--timeout {timeout:g}: give seconds, more than 0 and at most {MAX_TIMEOUT_S:g}")
        hold_stdout()  # the report reaches this stdout, whatever the model does to sys.stdout or fd 1
        with deadline(timeout, f"warmprof {args.command}"):
            return int(args._run(args) or 0)
    except Deadline as d:  # --timeout ran out outside a place that says more (traces/child.py does)
        e = TimedOut(f"{d}; no report was written")
        print(f"warmprof: error: {e}", file=sys.stderr)
        return e.exit_code
    except WarmprofError as e:
        from .system.launch import interrupt_seen

        if interrupt_seen():  # a Ctrl-C the model's code turned into its own error: main() says "interrupted"
            raise
        from .render.safe import safe_text

        if getattr(args, "traceback", False):
            _print_traceback(e)  # the one line last
        # One line, whatever the message quotes (a path or a name with control characters in it).
        print(f"warmprof: error: {safe_text(str(e))}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":  # pragma: no cover
    end(main())
