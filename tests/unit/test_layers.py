"""The layer table as data (README, Layout): every import of a warmprof module, relative or absolute,
at module level or inside a function, goes to its own layer or lower, never higher; a warmprof
module the table does not place fails, so a new top-level module must be given a floor."""

import ast
from pathlib import Path

import warmprof

PACKAGE = Path(warmprof.__file__).resolve().parent

# Top floor first. A name holds the module and everything under it, but for "warmprof", the package
# itself alone (what `from warmprof import x` reads when x is no module).
LAYERS = (
    ("cli", ("warmprof.cli", "warmprof.commands", "warmprof.__main__")),
    ("protocols", ("warmprof.traces", "warmprof.probes", "warmprof.serving")),
    ("engines", ("warmprof.instruments", "warmprof.attribution", "warmprof.render")),
    ("data", ("warmprof.report", "warmprof.timeline")),
    ("ground", ("warmprof.causes", "warmprof.devices", "warmprof.system", "warmprof.errors", "warmprof.stats",
                "warmprof.opspec", "warmprof._native", "warmprof")),
)
# The package __init__ lazily re-exports the public API from every floor: it imports anything.
EXEMPT = {"warmprof"}

# Upward imports in files being rewritten elsewhere (issue 23); each is to be fixed there, and this
# emptied. (importer, imported)
KNOWN: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()
KNOWN_NAMES = set(MODULES) | {"warmprof._native"}  # the compiled module (its stub: _native.pyi)


def floor_of(module: str) -> int | None:
    """The layer index (0 the top floor) of the longest table name holding `module`."""
    best, floor = -1, None
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            holds = module == name or (name != "warmprof" and module.startswith(name + "."))
            if holds and len(name) > best:
                best, floor = len(name), i
    return floor


def _resolve(importer: str, is_package: bool, node: ast.AST) -> list[str]:
    """The warmprof modules an import statement names (submodules where `from X import y` names one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "warmprof"]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "warmprof":
        return []
    out = []
    for a in node.names:
        sub = f"{target}.{a.name}"
        out.append(sub if sub in KNOWN_NAMES else target)
    return out


def imports() -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import of a warmprof module in the package."""
    out = []
    for module, path in sorted(MODULES.items()):
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                out += [(module, target, node.lineno) for target in dict.fromkeys(_resolve(module, is_package, node))]
    return out


def violations() -> list[tuple[str, str, int]]:
    return [(src, dst, line) for src, dst, line in imports()
            if src not in EXEMPT and floor_of(dst) is not None and floor_of(dst) < floor_of(src)]


def test_every_module_has_a_floor():
    missing = sorted(m for m in KNOWN_NAMES if floor_of(m) is None)
    assert not missing, f"not in the layer table (tests/unit/test_layers.py LAYERS, README Layout): {missing}"


def test_every_import_names_a_module_that_exists():
    unknown = sorted({(src, dst) for src, dst, _ in imports() if dst not in KNOWN_NAMES})
    assert not unknown, f"imports of no warmprof module: {unknown}"


def test_no_import_runs_up_a_floor():
    found = violations()
    upward = [f"{src}:{line} imports {dst} ({LAYERS[floor_of(dst)][0]} above {LAYERS[floor_of(src)][0]})"
              for src, dst, line in found if (src, dst) not in KNOWN]
    assert not upward, "\n".join(upward)
    stale = KNOWN - {(src, dst) for src, dst, _ in found}
    assert not stale, f"fixed: take these out of KNOWN: {sorted(stale)}"


def test_report_never_imports_render():
    """report/ sits below render/ (the table says so too; this names the rule): str(report) goes
    through a registry that render/ fills."""
    assert floor_of("warmprof.render") < floor_of("warmprof.report")
    bad = [(src, dst) for src, dst, _ in imports() if src.startswith("warmprof.report") and dst.startswith("warmprof.render")]
    assert not bad


def test_the_resolver_reads_relative_absolute_and_function_level_imports():
    tree = ast.parse("from .. import causes, stats\nfrom ..report.trace import Report\nimport warmprof.render.png\n"
                     "def f():\n    from . import api\n    from .. import _native\n")
    got = [t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
           for t in _resolve("warmprof.traces.build", False, node)]
    assert sorted(got) == sorted(["warmprof.causes", "warmprof.stats", "warmprof.report.trace",
                                  "warmprof.render.png", "warmprof.traces.api", "warmprof._native"])
    assert floor_of("warmprof.serving.watch.core") == 1 and floor_of("warmprof.system.platform") == 4
    assert floor_of("warmprof.newthing") is None
