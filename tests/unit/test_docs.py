"""The docs keep up with the CLI: every command and every option the parser has is named on its
command's page under docs/commands/, each command is in the README and the site's nav, the README
stays within 200 lines, and its links and set-up commands hold.

The parser is warmprof's own (cli.build_parser), walked recursively through its subparsers, so an
option added to a command's setup() fails here until its page names it. The site itself (links and
anchors between pages) is checked by `mkdocs build --strict` (.ci/docs.sh)."""

from __future__ import annotations

import argparse
import re
import unicodedata
from pathlib import Path

import pytest

from warmprof.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MKDOCS = ROOT / "mkdocs.yml"
README_MAX_LINES = 200


def cli_tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """{command path: its parser}: () for `warmprof` itself, ("trace",) for `warmprof trace`, and so
    on down every level of subparsers."""
    tree = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                tree.update(cli_tree(sub, path + (name,)))
    return tree


def page_of(path: tuple[str, ...]) -> Path:
    """The page that documents a command path: docs/commands/index.md for the options of `warmprof`
    itself, docs/commands/trace.md for `warmprof trace` (a nested `a b` would be a-b.md)."""
    return DOCS / "commands" / (("-".join(path) or "index") + ".md")


def names_option(text: str, option: str) -> bool:
    """The option string as a whole word: `--explain` is not named by `--explain-top`, `-K` not by `-Kx`."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def names_choice(text: str, choice: str) -> bool:
    """A choice value (`--cache fresh`) inside a code span of the page."""
    return re.search(rf"`[^`\n]*(?<![\w-]){re.escape(choice)}(?![\w-])[^`\n]*`", text) is not None


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """What the docs do not name: a command without its page, or an option string or choice its
    command's page does not mention. Empty when everything is documented."""
    missing = []
    for path, sub in cli_tree(parser).items():
        where = "warmprof" + "".join(" " + p for p in path)
        page = page_of(path)
        if not page.is_file():
            missing.append(f"{where}: no page {page.relative_to(ROOT)}")
            continue
        text = page.read_text(encoding="utf-8")
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            for option in action.option_strings:
                if not names_option(text, option):
                    missing.append(f"{where} {option}: not named on {page.relative_to(ROOT)}")
            if action.option_strings and action.choices is not None:
                for choice in action.choices:
                    if not names_choice(text, str(choice)):
                        missing.append(f"{where} {action.option_strings[0]} {choice}: choice not named on "
                                       f"{page.relative_to(ROOT)}")
    return missing


def test_the_walk_finds_every_command_and_their_options() -> None:
    # Not trivially true: the walk must see the CLI's real commands and options, hidden ones included.
    tree = cli_tree(build_parser())
    assert set(tree) == {()} | {(name,) for name in COMMANDS}
    options = {(path, o) for path, p in tree.items() for a in p._actions for o in a.option_strings}
    assert len(options) >= 60
    for known in [((), "--version"), (("trace",), "--threads"), (("trace",), "--fresh-process"),
                  (("probe",), "-K"), (("show",), "-o"), (("watch",), "--idle-at"), (("buckets",), "--from-probe")]:
        assert known in options


def test_every_command_and_option_is_documented() -> None:
    missing = undocumented(build_parser())
    assert not missing, "document these (docs/commands/<command>.md, its options table):\n" + "\n".join(missing)


def test_an_undocumented_option_or_command_fails() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    subparsers.choices["trace"].add_argument("--planted-undocumented-option", action="store_true")
    subparsers.choices["show"].add_argument("--planted-choice", choices=("planted-value", "text"))
    planted = subparsers.add_parser("planted-command")
    planted.add_argument("--threads")
    missing = undocumented(parser)
    assert missing == ["warmprof trace --planted-undocumented-option: not named on docs/commands/trace.md",
                       "warmprof show --planted-choice: not named on docs/commands/show.md",
                       "warmprof show --planted-choice planted-value: choice not named on docs/commands/show.md",
                       "warmprof planted-command: no page docs/commands/planted-command.md"]


def test_option_matching_is_by_whole_word() -> None:
    assert names_option("| `--explain-top N` | ops |", "--explain-top")
    assert not names_option("| `--explain-top N` | ops |", "--explain")
    assert not names_option("`-Kx`", "-K")
    assert names_option("`-K K`", "-K")
    assert names_choice("`--cache {fresh,keep}`", "keep")
    assert not names_choice("keep it fresh", "keep")


def test_every_command_is_in_the_readme_and_the_nav() -> None:
    readme = README.read_text(encoding="utf-8")
    nav = MKDOCS.read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"warmprof {name}" in readme, name
        assert f"commands/{name}.md" in nav, name
        assert f"(docs/commands/{name}.md)" in readme, name


def test_readme_is_at_most_200_lines() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail into docs/"


def test_readme_setup_commands_in_order() -> None:
    # The CPU build of torch first, then warmprof and the demo, then the tests (.ci/run runs the last).
    readme = README.read_text(encoding="utf-8")
    cpu = readme.find("pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
    demo = readme.find("pip install torch==2.13.0 . && warmprof trace --demo")
    tests = readme.find('pip install torch==2.13.0 ".[test]" && python -m pytest -q')
    assert 0 <= cpu < demo < tests
    assert "--threads 1" in readme[:readme.find("## One real report")]


def _slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) makes it."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, flags=re.M)}


def test_readme_links_resolve() -> None:
    text = re.sub(r"```.*?```", "", README.read_text(encoding="utf-8"), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / target) if target else README
        assert path.is_file(), link
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), link


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")))
def test_every_page_is_in_the_nav(page: str) -> None:
    assert f" {page}" in MKDOCS.read_text(encoding="utf-8")
