"""Golden plans: `plan(detect(root))` for every captured host equals its reviewed profile.

Adding a machine = adding one directory: tests/data/hosts/<name>/ (a capture tree) with its
expected_profile.json. Captures that must stay in ../shared (SOURCES.md "no") are laid out in a
temporary root and compared with tests/data/plan/shared/<name>/expected_profile.json.
Regenerate with `HWTUNE_UPDATE_GOLDEN=1 pytest tests/test_plan_golden.py`, then review the diff.
The plan's fingerprint (a hash of every detected fact) is masked, so a reworded probe basis
does not churn the files; everything the planner decides is compared.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from hwtune.models.convert import dump
from hwtune.planner import plan
from hwtune.probes import detect
from tests.conftest import DATA, SHARED_HW
from tests.test_plan_invariants import KNOWLEDGE, check_invariants

HOSTS = DATA / "hosts"
SHARED_GOLDEN = DATA / "plan" / "shared"
UPDATE = os.environ.get("HWTUNE_UPDATE_GOLDEN") == "1"
MASK = "<fingerprint>"


def host_dirs() -> list[Path]:
    return sorted(p for p in HOSTS.iterdir() if p.is_dir()) if HOSTS.is_dir() else []


def shared_only_captures() -> list[str]:
    """Captures SOURCES.md keeps in ../shared ("no"), by file name."""
    sources = SHARED_HW / "SOURCES.md"
    if not sources.is_file():
        return []
    names = []
    for line in sources.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if (
            len(cells) >= 6
            and cells[-1].startswith("no")
            and cells[0].endswith((".cpuinfo", ".lscpu"))
        ):
            names.append(cells[0])
    return names


def lay_out(capture: Path, root: Path) -> Path:
    """One capture file as a root: proc/cpuinfo, or lscpu.txt (as the detect tests do)."""
    if capture.suffix == ".cpuinfo":
        (root / "proc").mkdir(parents=True)
        shutil.copyfile(capture, root / "proc" / "cpuinfo")
    else:
        root.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(capture, root / "lscpu.txt")
    return root


def golden_json(root: Path) -> dict[str, Any]:
    hw = detect(root, gpus=True, tensorflow=True)
    profile = plan(hw, knowledge=KNOWLEDGE)
    check_invariants(hw, profile)
    data: dict[str, Any] = json.loads(json.dumps(dump(profile)))  # lists, as the file holds
    data["fingerprint"] = MASK
    if data["bazel"] is not None:
        data["bazel"]["bazelrc"] = data["bazel"]["bazelrc"].replace(profile.fingerprint, MASK)
    return data


def compare(actual: dict[str, Any], expected_path: Path) -> None:
    if UPDATE:
        expected_path.parent.mkdir(parents=True, exist_ok=True)
        expected_path.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n")
        return
    if not expected_path.is_file():
        pytest.fail(
            f"{expected_path} is missing: run HWTUNE_UPDATE_GOLDEN=1 pytest "
            "tests/test_plan_golden.py "
            "and review the new file"
        )
    expected = json.loads(expected_path.read_text())
    for key in expected:  # key by key, so a failure names the part of the plan that moved
        assert actual.get(key) == expected[key], f"{expected_path}: '{key}' differs"
    assert actual == expected


@pytest.mark.parametrize("host", host_dirs(), ids=lambda p: p.name)
def test_golden_host(host: Path) -> None:
    compare(golden_json(host), host / "expected_profile.json")


def shared_cases() -> list[Any]:
    """The shared-only captures, or one case that skips saying why there are none (pytest's
    own skip for an empty list says only "got empty parameter set")."""
    names: list[Any] = shared_only_captures()
    if names:
        return names
    if not SHARED_HW.is_dir():
        why = (
            "the maintainers' shared captures (shared/fixtures/hw beside the repository) are "
            "not present: the plans of the captures kept only there (tests/data/plan/shared) "
            "are not compared"
        )
    else:
        why = "the shared captures' SOURCES.md lists no cpuinfo or lscpu capture kept only there"
    return [pytest.param("", marks=pytest.mark.skip(reason=why), id="no-shared-captures")]


@pytest.mark.parametrize("name", shared_cases())
def test_golden_shared_capture(name: str, shared_hw: Path, tmp_path: Path) -> None:
    root = lay_out(shared_hw / name, tmp_path / "root")
    compare(golden_json(root), SHARED_GOLDEN / Path(name).stem / "expected_profile.json")
