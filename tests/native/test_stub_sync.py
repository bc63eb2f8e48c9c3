"""python/warmprof/_native.pyi and the built module name the same things with the same parameters.

The test-only submodule `_native._testing` is stubbed as the type-only class `_TestingModule`
(static methods) and checked the same way."""

import ast
import inspect
import re
from pathlib import Path

import pytest

from warmprof import _native

STUB = Path(__file__).resolve().parents[2] / "python" / "warmprof" / "_native.pyi"
# Set by the import machinery, not by the module: never stubbed.
IMPORT_ATTRS = {"__doc__", "__file__", "__loader__", "__name__", "__package__", "__spec__"}


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text(), filename=str(STUB))


TESTING_CLASS = "_TestingModule"


def _testing_class() -> ast.ClassDef:
    return next(n for n in _stub_tree().body if isinstance(n, ast.ClassDef) and n.name == TESTING_CLASS)


def _stub_functions() -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in _stub_tree().body if isinstance(n, ast.FunctionDef)}


def _stub_testing_functions() -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in _testing_class().body if isinstance(n, ast.FunctionDef)}


def _stub_names() -> set[str]:
    names = set()
    for node in _stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and hasattr(_native, node.name):  # a type the module exports
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _module_names(module=_native) -> set[str]:
    return set(dir(module)) - IMPORT_ATTRS


def _split_top_level(params: str) -> list[str]:
    """Splits "a: x[int, int], b: int = 0" on the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in params:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _module_signature(name: str, module=_native) -> list[tuple[str, bool]]:
    """(parameter, has default) from the signature line both pybind11 and the fast methods write first."""
    doc = getattr(module, name).__doc__ or ""
    match = re.match(rf"{re.escape(name)}\((.*)\) ->", doc.lstrip().splitlines()[0] if doc.strip() else "")
    assert match, f"{module.__name__}.{name} has no signature line in its docstring: {doc!r}"
    params = []
    for part in _split_top_level(match.group(1)):
        head = part.split("=", 1)
        params.append((head[0].split(":", 1)[0].strip(), len(head) == 2))
    return params


def _stub_signature(fn: ast.FunctionDef) -> list[tuple[str, bool]]:
    args = fn.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    return [(a.arg, i >= first_default) for i, a in enumerate(positional)]


def test_stub_names_equal_module_names():
    stub, module = _stub_names(), _module_names()
    assert not module - stub, f"in the module but not in _native.pyi: {sorted(module - stub)}"
    assert not stub - module, f"in _native.pyi but not in the module: {sorted(stub - module)}"


def test_stub_classes_are_private_type_helpers_or_the_modules_types():
    for node in _stub_tree().body:
        if isinstance(node, ast.ClassDef):
            if hasattr(_native, node.name):  # a type of the module's own (WatchCore): stubbed with its methods
                assert isinstance(getattr(_native, node.name), type), node.name
                methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
                assert methods <= set(dir(getattr(_native, node.name))), node.name
            else:
                assert node.name.startswith("_"), node.name


def test_the_testing_submodule_is_stubbed_name_for_name():
    stub, module = set(_stub_testing_functions()), _module_names(_native._testing)
    assert stub == module, f"module only: {sorted(module - stub)}; stub only: {sorted(stub - module)}"
    assert not any(n.startswith("_") for n in module), "test-only names need no underscore inside _testing"


@pytest.mark.parametrize("name", sorted(_module_names(_native._testing)))
def test_testing_stub_parameters_match_the_module(name):
    fn = _stub_testing_functions()[name]
    assert any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list), name
    assert _stub_signature(fn) == _module_signature(name, _native._testing)
    assert fn.returns is not None, f"_testing.{name} has no return annotation in the stub"


@pytest.mark.parametrize("name", sorted(n for n in _module_names()
                                        if callable(getattr(_native, n)) and not isinstance(getattr(_native, n), type)))
def test_stub_parameters_match_the_module(name):
    fn = _stub_functions()[name]
    assert _stub_signature(fn) == _module_signature(name)
    assert fn.returns is not None, f"{name} has no return annotation in the stub"
    assert all(a.annotation is not None for a in fn.args.posonlyargs + fn.args.args), name


def test_fast_methods_are_positional_only_in_the_stub():
    functions = _stub_functions()
    for name in ("begin", "end", "instant", "counter"):
        assert inspect.isbuiltin(getattr(_native, name))
        assert functions[name].args.posonlyargs and not functions[name].args.args, name


def test_stub_constants_have_the_module_types():
    for node in _stub_tree().body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = getattr(_native, node.target.id)
            if node.target.id == "_testing":
                assert type(value).__name__ == "module" and ast.unparse(node.annotation) == TESTING_CLASS
                continue
            assert type(value).__name__ == ast.unparse(node.annotation), node.target.id


def test_the_watch_call_record_is_stubbed_field_by_field():
    """WatchCall's fields are declared once, in csrc/watch_type.cpp: the stub names them in order."""
    cls = next(n for n in _stub_tree().body if isinstance(n, ast.ClassDef) and n.name == "WatchCall")
    stubbed = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and not n.target.id.startswith("n_")]
    assert tuple(stubbed) == _native.WatchCall.__match_args__
    assert _native.WatchCall.n_fields == len(stubbed)
