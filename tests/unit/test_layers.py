"""The layer table as data (README, Layout): every import of a warmprof module, relative or absolute,
at module level or inside a function, goes to its own layer or lower, never higher; a warmprof
module the table does not place fails, so a new top-level module must be given a floor. No circle of
imports runs among the modules of traces/ nor among those of report/, and no module is over 700 lines."""

import ast
from pathlib import Path
from typing import Iterable

import pytest

import warmprof

PACKAGE = Path(warmprof.__file__).resolve().parent

# Top floor first. A name holds the module and everything under it, but for "warmprof", the package
# itself alone (what `from warmprof import x` reads when x is no module).
LAYERS = (
    ("cli", ("warmprof.cli", "warmprof.commands", "warmprof.__main__")),
    ("protocols", ("warmprof.traces", "warmprof.probes", "warmprof.serving", "warmprof.runs")),
    ("engines", ("warmprof.instruments", "warmprof.attribution", "warmprof.render")),
    ("data", ("warmprof.report", "warmprof.timeline", "warmprof.import_spans", "warmprof.gc_spans")),
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


def imports(modules: dict[str, Path] | None = None) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import of a warmprof module in the package (or in
    `modules`, name -> file, as _modules() gives them)."""
    out = []
    for module, path in sorted((MODULES if modules is None else modules).items()):
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


# -- no import circles, no long modules -------------------------------------------------------------
# Packages whose modules import one another in one direction only: a circle there is a module that
# should be split, or a function living on the wrong side of it.
CIRCLE_FREE = ("warmprof.traces", "warmprof.report")
MAX_LINES = 700


def circles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Each import circle of a graph (importer, imported): one per strongly connected component of
    more than one module, as a path through it that closes on itself (["a", "b", "a"]), sorted. A
    module importing itself is no circle."""
    return [cycle for cycle, _ in circles_and_components(edges)]


def circles_and_components(edges: Iterable[tuple[str, str]]) -> list[tuple[list[str], list[str]]]:
    """circles(), each with every module of its strongly connected component (sorted)."""
    graph: dict[str, list[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, [])
        graph.setdefault(dst, [])
        if src != dst and dst not in graph[src]:
            graph[src].append(dst)
    for targets in graph.values():
        targets.sort()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted((_cycle_through(graph, set(c), c[0]), c) for c in components)


def _cycle_through(graph: dict[str, list[str]], members: set[str], start: str) -> list[str]:
    """A shortest path from `start` back to itself inside one strongly connected component."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is on no circle of its component")  # pragma: no cover


def package_circles(package: str, modules: dict[str, Path] | None = None) -> list[str]:
    """The import circles among the modules of `package`, each said with the line of every import in it."""
    def inside(m: str) -> bool:
        return m == package or m.startswith(package + ".")

    found = [(src, dst, line) for src, dst, line in imports(modules) if inside(src) and inside(dst)]
    first_line: dict[tuple[str, str], int] = {}
    for src, dst, line in found:
        first_line.setdefault((src, dst), line)
    out = []
    for c, component in circles_and_components((src, dst) for src, dst, _ in found):
        said = " -> ".join([f"{a}:{first_line[(a, b)]}" for a, b in zip(c, c[1:])] + [c[-1]])
        if len(component) > len(c) - 1:
            said += f" (one circle of several, among {', '.join(component)})"
        out.append(said)
    return out


def long_modules(modules: dict[str, Path], limit: int = MAX_LINES) -> dict[str, int]:
    """Module -> its line count, for each module over `limit` lines."""
    counts = {m: len(path.read_text().splitlines()) for m, path in modules.items()}
    return {m: n for m, n in sorted(counts.items()) if n > limit}


@pytest.mark.parametrize("package", CIRCLE_FREE)
def test_no_import_circle_among_a_packages_modules(package):
    found = package_circles(package)
    assert not found, f"import circles among the modules of {package} (module:line of each import):\n" + "\n".join(found)


def test_no_module_is_over_700_lines():
    long = long_modules(MODULES)
    assert not long, f"modules over {MAX_LINES} lines (split them): " + ", ".join(f"{m} ({n})" for m, n in long.items())


def test_the_circle_finder_names_each_circle_and_nothing_else():
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "f"), ("g", "a"),
             ("e", "h")]
    assert circles(edges) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert circles([("a", "b"), ("b", "c"), ("a", "c")]) == []  # a diamond's two paths are no circle
    assert circles([("x", "x")]) == []
    # two circles sharing a module are one component, named by a circle through its first module
    assert circles_and_components([("a", "b"), ("b", "a"), ("b", "c"), ("c", "b")]) == [(["a", "b", "a"], ["a", "b", "c"])]


def test_the_passes_and_the_options_never_import_the_driver():
    """traces/passes.py and traces/options.py sit below traces/api.py (the protocol's driver): the
    control processes import the passes without the driver."""
    below = {"warmprof.traces.passes", "warmprof.traces.options"}
    bad = [(src, dst, line) for src, dst, line in imports() if src in below and dst == "warmprof.traces.api"]
    assert not bad


def _plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """Files under root/warmprof/... as modules (name -> path), as _modules() reads the package."""
    out = {}
    for name, text in files.items():
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out[name] = path
    return out


def test_a_planted_circle_fails_naming_it_and_its_lines(tmp_path):
    modules = _plant(tmp_path, {
        "warmprof.traces.one": "from .two import f\n",
        "warmprof.traces.two": "def f():\n    from .three import g\n",  # inside a function counts too
        "warmprof.traces.three": "import warmprof.traces.one\n",
        "warmprof.traces.four": "from .one import x\n",
        "warmprof.report.five": "from ..traces import one\n",
    })
    assert package_circles("warmprof.traces", modules) == [
        "warmprof.traces.one:1 -> warmprof.traces.two:2 -> warmprof.traces.three:1 -> warmprof.traces.one"]
    assert package_circles("warmprof.report", modules) == []


def test_a_planted_long_module_fails(tmp_path):
    modules = _plant(tmp_path, {"warmprof.long": "x = 1\n" * (MAX_LINES + 1), "warmprof.fits": "x = 1\n" * MAX_LINES})
    assert long_modules(modules) == {"warmprof.long": MAX_LINES + 1}
