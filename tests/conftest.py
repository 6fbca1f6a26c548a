"""Shared test fixtures: paths to captured machines, and the CLI runner."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from hwtune.cli import Environment, main

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
# Captures that SOURCES.md says must stay in ../shared (not copied into the project).
SHARED_HW = REPO.parent / "shared" / "fixtures" / "hw"


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test starts from the environment the run started with: one that calls
    configure() in this process sets TF_* variables, which every later test's subprocesses
    would inherit (test_exec then saw TF_NUM_INTEROP_THREADS=1 as the caller's own)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class CliResult:
    exit_status: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str], environ: dict[str, str] | None = None) -> CliResult:
    """Call `hwtune.cli.main` in-process with captured streams."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, environ=dict(os.environ if environ is None else environ)
    )
    status = main(list(argv), env)
    return CliResult(status, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    return run_cli


@pytest.fixture
def shared_hw() -> Path:
    """The read-only captures in ../shared/fixtures/hw; skips when the folder is absent."""
    if not SHARED_HW.is_dir():
        pytest.skip(
            "the maintainers' shared captures (shared/fixtures/hw beside the repository) are "
            "not present; they are not copied into tests/"
        )
    return SHARED_HW
