"""What the command line names by MODULE:FACTORY or path/to/file.py:FACTORY (the model a trace runs,
the inputs it runs it on), and the inputs saved with torch.save (--inputs FILE.pt).

Loading is done in the process that traces (the child of a plain `warmprof trace`); the parent only
checks what it can without torch (check_inputs_spec)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from ..errors import InputError, WarmprofError
from ..system.torch_compat import load_weights_only

FORM = "MODULE:FACTORY or path/to/file.py:FACTORY"
INPUTS_FORM = "a FILE.pt saved with torch.save, or MODULE:FACTORY (path/to/file.py:FACTORY) returning the inputs"
INPUTS_KINDS = ("a tensor, a tuple or list of them (the positional arguments) or a dict of them by name "
                "(the keyword arguments)")
LISTED = 20  # callables named when a factory is not found


def split_target(target: str) -> tuple[str, str]:
    if ":" not in target:
        raise InputError(f"target {target!r} must look like {FORM}")
    where, name = target.rsplit(":", 1)
    return where, name


def caller_folder() -> str | None:
    """The current folder, where a dotted MODULE:FACTORY is looked up first (None where it is gone)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _on_path(folder: str) -> bool:
    """sys.path already looks in `folder` ('' is the current folder)."""
    try:
        return any(os.path.abspath(p or os.curdir) == folder for p in sys.path if isinstance(p, str))
    except OSError:  # the current folder is gone: '' finds nothing
        return folder in sys.path


@contextlib.contextmanager
def imported(where: str, folder: str | None = None) -> Iterator[ModuleType]:
    """The module `where` names (a dotted name, or a .py file). A file's folder is on sys.path while
    it loads and while the caller uses it (its factory runs here, so it can import the modules next
    to it), and taken off again afterwards. A dotted name is looked up in `folder` first (the caller's
    folder, where `warmprof trace` was run: caller_folder() when None), as `python -m` run there would
    have, on sys.path for as long. Nothing else is looked up there: warmprof's own processes start
    without the current folder on sys.path (system/launch.py), so a secrets.py or typing.py in it does
    not run inside them, while the target next to it is still found."""
    added = None
    try:
        try:
            if where.endswith(".py"):
                path = Path(where)
                if not path.is_file():
                    raise InputError(f"no such file: {where}")
                spec = importlib.util.spec_from_file_location(path.stem, path)
                assert spec is not None and spec.loader is not None  # a .py file: a source file loader
                module = importlib.util.module_from_spec(spec)
                added = str(path.parent.resolve())
                sys.path.insert(0, added)
                spec.loader.exec_module(module)
            else:
                folder = caller_folder() if folder is None else os.path.abspath(folder)
                if folder and not _on_path(folder):
                    added = folder
                    sys.path.insert(0, added)
                module = importlib.import_module(where)
        except WarmprofError:
            raise
        except (Exception, SystemExit) as e:
            raise InputError(f"cannot import {where!r}: {type(e).__name__}: {e}") from e
        yield module
    finally:
        if added is not None:
            try:
                sys.path.remove(added)
            except ValueError:  # the file took it off itself
                pass


def defined_callables(module: ModuleType) -> list[str]:
    """The public functions and classes the module itself defines (not the ones it imports)."""
    return [name for name, v in vars(module).items()
            if not name.startswith("_") and callable(v) and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", None) == module.__name__]


def factory_of(module: ModuleType, where: str, name: str, role: str = "") -> Callable:
    """module.<name>, or an InputError that lists what the module does define (`role` starts it,
    e.g. "--inputs m.py:make: ")."""
    fn = getattr(module, name, None)
    if fn is not None and callable(fn):
        return fn
    names = defined_callables(module)
    if not names:
        offer = "it defines no public functions or classes"
    else:
        shown = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
        offer = f"the callables it defines: {shown}"
    what = (f"has {name!r}, a {type(fn).__name__}, which is not callable" if fn is not None
            else f"has no callable {name!r}")
    raise InputError(f"{role}{where!r} {what}; {offer}")


def load_target(target: str, folder: str | None = None) -> Any:
    """MODULE:FACTORY or FILE.py:FACTORY -> the model the factory returns (a MODULE looked up in
    `folder` first: imported())."""
    where, name = split_target(target)
    with imported(where, folder) as module:
        return call_target(factory_of(module, where, name), target)


def call_target(fn: Callable, target: str) -> Any:
    """The factory's model; what it raises, as its error."""
    try:
        return fn()
    except (Exception, SystemExit) as e:  # sys.exit in a factory: said as its error, not an exit 0
        raise InputError(f"the factory {target} raised: {type(e).__name__}: {e}") from e


# -- --inputs ------------------------------------------------------------------------------------
def check_inputs_spec(spec: str) -> None:
    """What the parent can refuse before any work: a name that is neither a file nor MODULE:FACTORY,
    a folder, a FILE.py:FACTORY whose file is missing."""
    if not spec:
        raise InputError(f"--inputs needs {INPUTS_FORM}; got an empty value")
    if os.path.isdir(spec):
        raise InputError(f"--inputs {spec}: is a directory; give {INPUTS_FORM}")
    if os.path.exists(spec):
        return
    if ":" not in spec:
        raise InputError(f"--inputs {spec}: no such file (give {INPUTS_FORM})")
    where, _ = spec.rsplit(":", 1)
    if where.endswith(".py") and not os.path.isfile(where):
        raise InputError(f"--inputs {spec}: no such file: {where}")


def load_inputs(spec: str, say: Callable[[str], None] | None = None, folder: str | None = None) -> Any:
    """--inputs FILE.pt (torch.load) or MODULE:FACTORY (its return value) -> what trace(inputs=) takes,
    checked: a tensor, a tuple/list of arguments or a dict of keyword arguments, holding a tensor."""
    check_inputs_spec(spec)
    if os.path.exists(spec):
        value = _torch_load(spec, say)
        origin = f"--inputs {spec}: the file holds"
    else:
        where, name = split_target(spec)
        with imported(where, folder) as module:
            fn = factory_of(module, where, name, role=f"--inputs {spec}: ")
            try:
                value = fn()
            except Exception as e:
                raise InputError(f"--inputs {spec}: the factory raised: {type(e).__name__}: {e}") from e
        origin = f"--inputs {spec}: the factory returned"
    check_inputs_value(value, origin)
    return value


def _torch_load(path: str, say: Callable[[str], None] | None) -> Any:
    import pickle
    import warnings

    import torch

    if not os.path.isfile(path):
        raise InputError(f"--inputs {path}: not a regular file; give {INPUTS_FORM}")
    try:
        safe = "weights_only" in inspect.signature(torch.load).parameters
    except (TypeError, ValueError):
        safe = True
    if not safe:  # a torch before 1.13 has no weights_only: its load unpickles anything in the file
        (say or _warn)(f"--inputs {path}: torch {torch.__version__} has no torch.load(weights_only=True), so the "
                       "file is loaded with full unpickling, which can run code stored in it: load only files "
                       "you trust")
    try:
        with warnings.catch_warnings():  # torch's own warnings about a file it then refuses, say
            warnings.simplefilter("ignore")
            value, _ = load_weights_only(torch, path)
        return value
    except pickle.UnpicklingError as e:
        why = _unpickler_says(str(e))
        if safe and why.startswith("Unsupported global"):  # a class or function stored in the file
            name = why.split(" was not")[0].removeprefix("Unsupported global: ").removeprefix("GLOBAL ")
            raise InputError(f"--inputs {path}: the file holds a {name}, which torch.load(weights_only=True) does "
                             f"not unpickle; save {INPUTS_KINDS}, or build the inputs in Python and give "
                             "--inputs MODULE:FACTORY") from e
        raise InputError(f"--inputs {path}: cannot read it as a torch.save file (UnpicklingError: {why})") from e
    except Exception as e:  # truncated, not a torch file at all, a zip torch cannot read
        first = (str(e).strip().splitlines() or [""])[0]
        raise InputError(f"--inputs {path}: cannot read it as a torch.save file ({type(e).__name__}: {first})") from e


def _unpickler_says(message: str) -> str:
    """The reason in torch's long 'Weights only load failed' message (the line after 'WeightsUnpickler
    error:'), or the message's first line."""
    _, found, rest = message.partition("WeightsUnpickler error:")
    lines = [ln.strip() for ln in (rest if found else message).splitlines() if ln.strip()]
    return lines[0] if lines else "no reason given"


def _warn(line: str) -> None:
    from ..system.progress import say_on_stderr

    say_on_stderr(f"warmprof: {line}")


def check_inputs_value(value: Any, origin: str) -> None:
    """Refuse what cannot be a call of a model, naming where it came from."""
    import torch

    from .inputs import _holds_tensor

    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise InputError(f"{origin} a dict with the key {bad[0]!r}: a dict's keys are the model's keyword "
                             "argument names and must be strings (a tuple or list gives positional arguments)")
    elif not isinstance(value, (torch.Tensor, tuple, list)):
        raise InputError(f"{origin} a {type(value).__name__}: give {INPUTS_KINDS}")
    if not _holds_tensor(value):
        kind = type(value).__name__
        raise InputError(f"{origin} a {kind} that holds no tensor: give {INPUTS_KINDS}")
