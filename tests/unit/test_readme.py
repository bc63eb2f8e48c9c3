"""README.md's set-up commands: each written out as a command of its own, as CI and users run them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
CPU_TORCH = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"


def _set_up() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Set up")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _commands(section: str) -> list[str]:
    """Every line of the section's ```bash blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_set_up_commands_ci_relies_on_are_unchanged():
    commands = _commands(_set_up())
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 . && warmprof trace --demo" in commands
    assert ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 ".[test]" && python -m pytest -q'
            in commands)


def test_the_cpu_torch_install_is_a_command_of_its_own():
    section = _set_up()
    commands = _commands(section)
    assert CPU_TORCH in commands  # a whole line of a bash block, to copy as it is
    prose = re.sub(r"```bash\n.*?```", "", section, flags=re.S)
    assert "--index-url" not in prose  # not half-written inside a sentence or a parenthesis
    # in a virtual environment made on the line before it
    assert commands.index(CPU_TORCH) > 0 and "venv" in commands[commands.index(CPU_TORCH) - 1]


# Paths the Layout table names for other parts of issue 23 that land before this one merges; each
# entry goes once its path exists (the test below says when).
NOT_YET: set[str] = set()
FILE_NAME = re.compile(r"^[\w./-]+(/|\.(py|pyi|cpp|h|mm))$")
ROOT = README.parent
LAYOUT = ROOT / "docs" / "layout.md"  # the layout table (the README links to it)


def _layout_rows() -> list[tuple[list[str], list[str]]]:
    """(paths in the where column, file names in the what column) of each row of the Layout table."""
    text = LAYOUT.read_text(encoding="utf-8")
    start = text.index("| layer | where | what |")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start:end if end > 0 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "---"):
            continue
        where, what = (re.findall(r"`([^`]+)`", c) for c in cells[1:])
        rows.append((where, [w for w in what if FILE_NAME.match(w)]))
    return rows


def _where(paths: list[str]) -> list[str]:
    """The where column's paths from the repo root: a later entry may be relative to the first's folder."""
    first = paths[0].rstrip("/")
    base = first if paths[0].endswith("/") else str(Path(first).parent)
    out = [paths[0]]
    for p in paths[1:]:
        out.append(p if (ROOT / p).exists() or p.startswith(("csrc/", "python/")) else f"{base}/{p}")
    return out


def test_every_path_the_layout_table_names_exists():
    rows = _layout_rows()
    assert len(rows) >= 10
    missing = []
    for where, what in rows:
        paths = _where(where)
        missing += [p for p in paths if not (ROOT / p).exists() and p not in NOT_YET]
        folders = [ROOT / (p if p.endswith("/") else str(Path(p).parent)) for p in paths]
        missing += [w for w in what if not (ROOT / w).exists() and not any((f / w).exists() for f in folders)]
    assert not missing, f"the README's Layout names what the repo does not have: {missing}"
    landed = sorted(p for p in NOT_YET if (ROOT / p).exists())
    assert not landed, f"landed: take these out of NOT_YET: {landed}"


def test_the_layout_table_places_every_top_level_module():
    named = {Path(p.rstrip("/")).stem for where, _ in _layout_rows() for p in _where(where)}
    package = ROOT / "python" / "warmprof"
    top = {p.stem for p in package.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())
           and p.name != "__init__.py"}
    assert top - named == set(), f"top-level modules missing from the README's Layout: {sorted(top - named)}"


FIGURE = re.compile(r"(?<![\w.-])-?\d+(?:\.\d+)?(?= ?(?:ms|s|µs)\b)")


def _real_report() -> tuple[str, str]:
    """README's "One real report": the report's text (its ```text block) and the explanation after it."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## One real report")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block, "the real report is a ```text block"
    return block.group(1), section[block.end():]


def test_the_real_reports_explanation_quotes_only_its_own_figures():
    """Every duration the explanation quotes is one the report printed (issue 38: the README's example once
    said the steady passes waited 'about 25 ms each' where its own note said 0.17 ms); a figure worked out
    from the report's (a sum, a difference) is written with '=' after the report's own figures."""
    report, explanation = _real_report()
    printed = set(FIGURE.findall(report))
    assert printed
    for line in explanation.splitlines():
        quoted = line.split(" = ", 1)[0]  # after " = ": the result of a sum the line writes out
        for figure in FIGURE.findall(quoted):
            assert figure in printed, f"README explains a figure its report does not print: {figure!r} in {line!r}"


def test_the_real_report_adds_up():
    """The example's own accounting line: excess = causes + run-to-run + unattributed, as printed."""
    report, _ = _real_report()
    line = next(ln for ln in report.splitlines() if ln.strip().startswith("= excess"))
    assert "causes" in line and ("unattributed" in line or "over by" in line)
    assert not re.search(r"own cost[^\n]*: -\d", report) and not re.search(r"short pause: -\d", report)
