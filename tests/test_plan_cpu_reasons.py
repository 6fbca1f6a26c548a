"""Reasons of CPU plans read true on the captured machine they were planned for.

Each test plans a real capture (tests/data/hosts, or ../shared/fixtures/hw laid out as a root)
and checks a reason against what the capture shows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hwtune.doctor.analysis import _signals
from hwtune.models.convert import dump
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


def all_text(profile: Profile) -> str:
    """Every string of the profile (reasons, left-out notes, warnings), one per line."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(dump(profile))
    return "\n".join(found)


def test_measured_reasons_cite_no_file_users_lack(shared_hw: Path, tmp_path: Path) -> None:
    # bench/ is in hwtune's source tree, not in the installed package: a reason states the
    # measurement (what, where, the figure) instead of naming its results file.
    profiles = [
        # pinning: several instances
        planned(HOSTS / "spack-rhel7-haswell", instances=2),
        # oneDNN with one intra-op thread on an x86 CPU without bf16
        planned(HOSTS / "spack-rhel7-haswell", instances=24),
        # a dense model, one thread, oneDNN's AVX-512 kernels: XLA off
        planned(
            cpuinfo_root(shared_hw / "archspec-centos7-cascadelake.cpuinfo", tmp_path / "c"),
            model="dense",
        ),
    ]
    for profile in profiles:
        text = all_text(profile)
        assert "bench/" not in text
        assert "hwtune's repository" not in text
        assert "paired_arms" not in text
    assert "1.27x [1.23-1.31]" in all_text(profiles[0])  # the figures stay
    assert "2-vCPU EPYC Zen 4 VM" in all_text(profiles[1])
    assert profiles[2].jit.level.value == "off"
    assert "1-CPU quota" in profiles[2].jit.level.reason
