"""How warmprof starts Python processes of its own, and how its command line starts.

python_argv(): the command line of every Python process warmprof starts for itself (a trace's fresh
process, its control, --repeat's runs, --explain's warm process, the op probes). `python -m warmprof`
would put the current folder first on sys.path, ahead of the standard library, so a secrets.py or a
typing.py in the caller's folder would run inside warmprof's own processes (as root, when root traces
from a shared folder). The code given to `-c` here takes that entry off before anything is imported,
then runs the module as -m does (runpy, as __main__). The same on Python 3.10-3.13; with -P or
PYTHONSAFEPATH (3.11+) there is no entry to take off. Only a MODULE:FACTORY target is looked up in the
caller's folder, explicitly, while it is imported (traces/targets.py).

option() and with_options(): a value is passed as `--name=value` and a target after `--`, so a value or
a target that starts with "-" reaches the child as a value, never as an option of its own.

quiet_start(): Ctrl-C while `warmprof ...` imports (the first few tenths of a second, before cli.main
is in place to say it in a line) ends the process with "warmprof: interrupted" and exit 130, not a
traceback. Only a process that is the command line (`warmprof`, `python -m warmprof`, or one started
by python_argv) gets it; `import warmprof` in a program changes nothing.
"""

from __future__ import annotations

import os
import sys

# Nothing here imports more than the interpreter has loaded at start (os, sys; _signal is built in):
# quiet_start() runs while the command starts, and each import before it is time Ctrl-C is not quiet.
try:
    import _signal as _sig  # the C module signal.py wraps (signal.py would import enum first)
except ImportError:  # pragma: no cover
    import signal as _sig

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Sequence

# The code a child runs with -c (a line a step, so `ps` shows what it is): every sys.path entry that is the
# caller's folder comes off before any import that could find a module there (sys and os are loaded at
# start): the '' that -c puts first, and an empty or '.' entry of PYTHONPATH (`PYTHONPATH=$PYTHONPATH:/x`
# with PYTHONPATH unset makes one). Then the module runs as `python -m` runs it, from the warmprof this
# process runs: where that is not the one found first (run from a source tree with another copy
# installed, or found only through the caller's folder), the folder holding it goes first (it holds
# only the warmprof package).
_BOOT = ("# warmprof's own process (warmprof/system/launch.py): the current folder off sys.path, then -m\n"
         "import sys, os\n"
         "try: _cwd = os.getcwd()\n"
         "except OSError: _cwd = None\n"
         "sys.path[:] = [p for p in sys.path if p not in ('', '.') and (_cwd is None or os.path.abspath(p) != _cwd)]\n"
         "import importlib.util, runpy\n"
         "_spec = importlib.util.find_spec('warmprof')\n"
         "if _spec is None or not os.path.abspath(_spec.origin or '').startswith({home!r} + os.sep):"
         " sys.path.insert(0, {home!r}); sys.modules.pop('warmprof', None)\n"
         "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
# the folder holding this warmprof package (warmprof/system/launch.py, two folders up)
_HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def boot_code(module: str) -> str:
    return _BOOT.format(module=module, home=_HOME)


def python_argv(module: str = "warmprof", args: Sequence[str] = ()) -> list[str]:
    """[python, -c, CODE, *args]: `python -m module args...` without the current folder on sys.path."""
    return [sys.executable, "-c", boot_code(module), *args]


def option(name: str, value: Any) -> str:
    """`--name=value`: argparse reads the value as one even where it starts with '-'."""
    return f"--{name}={value}"


def with_options(argv: Sequence[str], *options: str) -> list[str]:
    """argv with `options` added before its `--` (after which everything is a positional), or at its end."""
    argv = list(argv)
    at = argv.index("--") if "--" in argv else len(argv)
    return argv[:at] + list(options) + argv[at:]


def positional(argv: Sequence[str], *values: str) -> list[str]:
    """argv, then `--` and the positional values (a target that starts with '-' is not read as an option)."""
    return [*argv, "--", *values] if values else list(argv)


# ---- Ctrl-C while the command line starts -------------------------------------------------------

INTERRUPTED = 130


def _interrupted(signum: int, frame: Any) -> None:
    """SIGINT before cli.main is in place: nothing is running yet (no child, no temp folder)."""
    try:
        os.write(2, b"warmprof: interrupted\n")
    except OSError:
        pass
    os._exit(INTERRUPTED)


def is_command_line() -> bool:
    """This process is warmprof's command line: `python -m warmprof` (runpy imports the package with
    sys.argv[0] == '-m'), a child started by python_argv, or the `warmprof` script pip installs."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if getattr(main_spec, "name", None) == "warmprof.__main__":  # running: -m or python_argv's runpy
        return True
    argv0 = sys.argv[0] if sys.argv else ""
    orig = list(getattr(sys, "orig_argv", []))
    pairs = set(zip(orig, orig[1:]))
    if argv0 == "-m":
        return ("-m", "warmprof") in pairs
    if argv0 == "-c":
        return ("-c", boot_code("warmprof")) in pairs
    if os.path.basename(argv0).removesuffix(".exe") == "warmprof":
        main = sys.modules.get("__main__")
        path = getattr(main, "__file__", None)
        if path and os.path.abspath(path) == os.path.abspath(argv0):
            try:
                with open(path, "rb") as f:
                    return b"warmprof.cli" in f.read(4096)  # pip's script: from warmprof.cli import main
            except OSError:
                return False
    return False


def quiet_start() -> None:
    """Called first thing when the warmprof package is imported: in warmprof's command line, Ctrl-C
    until cli.main takes over (started()) ends the process quietly (one line, exit 130). SIGINT left
    as it is where it is not Python's default (ignored: a background job)."""
    try:
        if (sys.flags.interactive or not is_command_line()
                or _sig.getsignal(_sig.SIGINT) is not _sig.default_int_handler):
            return
        _sig.signal(_sig.SIGINT, _interrupted)
    except (ValueError, OSError, AttributeError):  # not the main thread, or no signals here
        pass


_sigint_seen = False


def _raise_interrupt(signum: int, frame: Any) -> None:
    """SIGINT once cli.main is in place: Python's own KeyboardInterrupt, and a mark that it came. Code the
    interrupt lands in may turn it into another error and lose it from the chain (CPython's C paths inside
    an import that inductor's compile made: `TypeError: expected a message argument`), and the mark still
    says that what ended the command was a Ctrl-C (cli._an_interrupt)."""
    global _sigint_seen
    _sigint_seen = True
    _sig.default_int_handler(signum, frame)


def _unraisable(unraisable: Any) -> None:
    """sys.unraisablehook in the command line: a Ctrl-C that landed in code Python cannot raise from (the
    weakref callback importlib's module locks run, a __del__) would be printed as "Exception ignored" with a
    traceback, and lost; it is raised again in the main thread instead (the SIGINT handler runs again)."""
    global _sigint_seen, _in_hook
    exc_type = getattr(unraisable, "exc_type", None)
    if not (isinstance(exc_type, type) and issubclass(exc_type, KeyboardInterrupt)):
        _unraisable_before(unraisable)
        return
    import _thread

    _sigint_seen = _in_hook = True
    try:  # raised again from another thread once this hook has returned: raised here, it would be lost again
        _thread.start_new_thread(_interrupt_main_after_hook, ())
    except Exception:  # no thread to be had (the interpreter is ending): said as Python would have
        _in_hook = False
        _unraisable_before(unraisable)
        return
    _in_hook = False  # the last statement: nothing between it and the return checks for signals


_in_hook = False


def _interrupt_main_after_hook() -> None:
    import _thread
    import time

    while _in_hook:
        time.sleep(0.001)
    _thread.interrupt_main()


_unraisable_before = sys.__unraisablehook__


def interrupt_seen() -> bool:
    """A SIGINT reached this command line since cli.main took over."""
    return _sigint_seen


def started() -> None:
    """cli.main is in place (its own `except KeyboardInterrupt` says it): Ctrl-C raises again."""
    try:
        if _sig.getsignal(_sig.SIGINT) is _interrupted:
            global _unraisable_before
            _sig.signal(_sig.SIGINT, _raise_interrupt)
            _unraisable_before, sys.unraisablehook = sys.unraisablehook, _unraisable
    except (ValueError, OSError):
        pass


__all__ = ["INTERRUPTED", "boot_code", "option", "positional", "python_argv", "quiet_start", "started",
           "with_options"]
