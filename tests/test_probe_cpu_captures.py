"""probe_cpu/probe_numa against real captures and the facts their EXPECTED.json establishes.

The captures SOURCES.md allows to copy live under tests/data/hosts/<name>/ (with the EXPECTED.json
entry beside them); the others are laid out from ../shared/fixtures/hw at test time, as
fixture-score lays them out, and skip when that folder is absent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes import detect
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.numa import probe_numa
from tests.conftest import DATA

HOSTS = DATA / "hosts"
COPIED = sorted(p.name for p in HOSTS.iterdir() if (p / "EXPECTED.json").is_file())
# The rows SOURCES.md marks "no: read from ../shared".
SHARED = [
    "archspec-unknown-sapphirerapids.cpuinfo",
    "archspec-rocky8.5-zen4.cpuinfo",
    "archspec-rocky9-zen5.cpuinfo",
    "archspec-centos7-cascadelake.cpuinfo",
    "archspec-rhel8-neoverse_v1.cpuinfo",
    "archspec-rhel8-power9.cpuinfo",
    "archspec-unknown-power10.cpuinfo",
    "archspec-rocky8-a64fx.cpuinfo",
    "archspec-rhel9-neoverse_v2.cpuinfo",
    "archspec-ubuntu22.04-ampere1.cpuinfo",
]


def gcc_name(label: str) -> str:
    """EXPECTED.json's archspec-style label -> the GCC -march/-mcpu name detect reports."""
    word = label.split()[0]
    if word == "zen":
        return "znver1"
    if word.startswith("zen"):
        return "znver" + word[3:]
    if word.startswith("power") and word.endswith("le"):
        return word[:-2]
    return word.replace("_", "-")


def check(cpu: CpuInfo, numa: tuple[NumaNode, ...], facts: dict[str, Any]) -> None:
    assert cpu.arch == facts["arch"]
    flags = set(cpu.flags)
    for name, present in facts["flags"].items():
        names = {"neon", "asimd"} if name == "neon/asimd" else {name}
        assert bool(flags & names) == present, name
    if facts.get("model_name") is not None:
        assert cpu.model_name == facts["model_name"]
    if facts["arch"] != "aarch64":
        assert cpu.vendor == facts["vendor"]
    for field in ("logical_cpus", "physical_cores", "sockets"):
        # Incomplete captures must not be extrapolated: their counts stay null.
        want = facts[field] if facts["complete"] else None
        assert getattr(cpu, field) == want, field
    if facts.get("threads_per_core") is not None or facts["complete"]:
        assert cpu.threads_per_core == facts.get("threads_per_core")
    if facts.get("smt_enabled") is not None:
        assert cpu.smt_enabled == facts["smt_enabled"]
    if facts["complete"] and facts.get("numa_nodes") is not None:
        assert len(numa) == facts["numa_nodes"]
    if not facts["complete"]:
        assert numa == ()
    assert cpu.microarch == gcc_name(facts["microarchitecture"])
    assert cpu.microarch_basis
    if facts.get("hybrid") is not None:
        assert bool(cpu.core_types) == facts["hybrid"]
    if facts.get("virtualized") is not None:
        assert (cpu.hypervisor is not None) == facts["virtualized"]


def probe(root: Path) -> tuple[CpuInfo, tuple[NumaNode, ...], IssueLog]:
    issues = IssueLog()
    cpu = probe_cpu(root, issues)
    return cpu, probe_numa(root, issues, cpu), issues


@pytest.mark.parametrize("name", COPIED)
def test_copied_capture(name: str) -> None:
    expected = json.loads((HOSTS / name / "EXPECTED.json").read_text())
    cpu, numa, issues = probe(HOSTS / name)
    check(cpu, numa, expected["facts"])
    if not expected["facts"]["complete"]:
        assert any(i.probe == "cpu" and "unknown" in i.reason for i in issues)


@pytest.mark.parametrize("name", SHARED)
def test_shared_capture(name: str, shared_hw: Path, tmp_path: Path) -> None:
    facts = json.loads((shared_hw / "EXPECTED.json").read_text())["files"][name]
    (tmp_path / "proc").mkdir()
    shutil.copy(shared_hw / name, tmp_path / "proc" / "cpuinfo")
    cpu, numa, _ = probe(tmp_path)
    check(cpu, numa, facts)


def test_copied_captures_are_the_shared_files_verbatim(shared_hw: Path) -> None:
    for name in COPIED:
        capture = json.loads((HOSTS / name / "EXPECTED.json").read_text())["capture"]
        copy = HOSTS / name / ("lscpu.txt" if capture.endswith(".lscpu") else "proc/cpuinfo")
        assert copy.read_bytes() == (shared_hw / capture).read_bytes(), name


def test_power_fragment_names_the_missing_processors() -> None:
    _, _, issues = probe(HOSTS / "cpufeatures-ppc64le-power9-w8-fragment")
    reasons = [i.reason for i in issues if i.probe == "cpu"]
    assert "only 1 of >=144 processors present: topology unknown" in reasons


def test_gcp_wrapped_flags_are_rejoined_exactly() -> None:
    cpu, numa, _ = probe(HOSTS / "alamb-gcp-c3-xeon8481c-spr-vm")
    # The capture breaks these mid-token: 'l'+'ahf_lm', 'avx'+'2', 'sha_n'+'i', 'v'+'aes'.
    assert {"lahf_lm", "avx2", "sha_ni", "vaes", "md_clear", "syscall"} <= set(cpu.flags)
    assert not {"l", "ahf_lm", "sha_n", "i", "v", "aes_", "r"} & set(cpu.flags)
    assert len(cpu.flags) == 106
    # AMX is not in this guest's flags: the model must not add it, only the basis says so.
    assert "amx_tile" not in cpu.flags and "amx_tile" in (cpu.microarch_basis or "")
    assert [n.cpus[:2] for n in numa] == [(0, 1), (22, 23), (44, 45), (66, 67)]
    assert cpu.hypervisor == "KVM"


def test_meteor_lake_hybrid_from_lscpu_rows() -> None:
    cpu, numa, _ = probe(HOSTS / "utillinux-x86_64-meteor_lake")
    kinds = {t.kind: (len(t.cpus), t.cores) for t in cpu.core_types}
    assert kinds == {"performance": (12, 6), "efficiency": (10, 10)}
    # Siblings share the machine-wide core index; CPUs 0 and 5 are one P-core here.
    by_cpu = {c.cpu: c for c in cpu.topology}
    assert by_cpu[0].core == by_cpu[5].core and by_cpu[0].kind == "performance"
    assert by_cpu[20].kind == "efficiency"
    assert len(numa) == 1 and numa[0].cpus == tuple(range(22))


def test_epyc_rows_give_per_cpu_nodes_and_sockets() -> None:
    cpu, numa, _ = probe(HOSTS / "utillinux-x86_64-epyc_7451")
    by_cpu = {c.cpu: c for c in cpu.topology}
    assert by_cpu[0].core == by_cpu[48].core  # SMT siblings are N and N+48
    assert (by_cpu[47].socket, by_cpu[47].node) == (1, 7)
    assert [len(n.cpus) for n in numa] == [12] * 8


def test_detect_on_a_capture_keeps_issues_in_hardware() -> None:
    hw = detect(HOSTS / "archspec-amazon-graviton2", gpus=False, tensorflow=False)
    assert hw.cpu.microarch == "neoverse-n1"
    assert any(i.probe == "cpu" and i.path == "proc/cpuinfo" for i in hw.issues)
