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
