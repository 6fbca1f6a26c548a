"""`import hwtune` has no side effects; the CLI is a thin, documented shell."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, run_cli

PROBE = r"""
import builtins, json, os, sys
before_env = dict(os.environ)
opened = []
real_open = builtins.open
def spy(file, *a, **k):
    opened.append(str(file))
    return real_open(file, *a, **k)
builtins.open = spy
import hwtune
builtins.open = real_open
print(json.dumps({
    "env_changed": dict(os.environ) != before_env,
    "opened": opened,
    "heavy": sorted(
        m for m in ("pydantic", "psutil", "tensorflow", "pynvml", "cpuinfo") if m in sys.modules
    ),
}))
"""


def test_import_has_no_side_effects() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    facts = json.loads(out)
    assert facts == {"env_changed": False, "opened": [], "heavy": []}


def test_public_names_resolve_lazily() -> None:
    import hwtune

    assert callable(hwtune.detect)
    assert callable(hwtune.plan)
    assert callable(hwtune.configure)
    assert "detect" in dir(hwtune)


def test_cli_without_command_prints_help_and_usage_status() -> None:
    result = run_cli([])
    assert result.exit_status == 2
    assert "detect" in result.stdout and "tune" in result.stdout


def test_python_dash_m_works() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hwtune", "--version"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0 and proc.stdout.startswith("hwtune ")


def test_pyproject_lists_every_package() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the tomli dependency pyproject.toml declares for 3.10
        import tomli as tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "hwtune").rglob("__init__.py")
    } | {"hwtune.bazel_templates"}
    assert set(config["packages"]) == on_disk
