"""Reasons of CPU plans read true on the captured machine they were planned for.

Each test plans a real capture (tests/data/hosts, or ../shared/fixtures/hw laid out as a root)
and checks a reason against what the capture shows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hwtune.doctor.analysis import _signals
from hwtune.models.profile import Profile
from hwtune.planner import plan
from hwtune.probes import detect
from tests.conftest import DATA
from tests.test_plan_invariants import KNOWLEDGE

HOSTS = DATA / "hosts"


def planned(root: Path, **intent: object) -> Profile:
    return plan(detect(root, gpus=True, tensorflow=True), knowledge=KNOWLEDGE, **intent)


def cpuinfo_root(capture: Path, root: Path) -> Path:
    (root / "proc").mkdir(parents=True)
    shutil.copyfile(capture, root / "proc" / "cpuinfo")
    return root


def test_dense_xla_reason_names_the_keras_argument() -> None:
    profile = planned(HOSTS / "spack-rhel7-haswell", model="dense")
    assert "jit_compile=True" in profile.jit.level.reason
    assert "report." not in profile.jit.level.reason


def test_doctor_xla_fix_names_the_keras_argument() -> None:
    (xla,) = [f for f in _signals({"xla": "not seen"}) if f.id == "xla-not-used"]
    assert "jit_compile=True" in xla.fix
    assert "report." not in xla.fix
