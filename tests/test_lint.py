"""Lint, format and types are part of the suite, so `.ci/run` (the README's test line) checks
them: `ruff check`, `ruff format --check` and `mypy --strict` (configured in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed: pip install -e '.[test]' brings it")
    return str(found)


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "hwtune", "tests", "bench"],
        ["ruff", "format", "--check", "hwtune", "tests", "bench"],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_clean(command: list[str]) -> None:
    done = subprocess.run(
        [_tool(command[0]), *command[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
