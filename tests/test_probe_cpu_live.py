"""On this machine, probe_cpu/probe_numa must agree with `lscpu` and `nproc --all`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hwtune.models.cpulist import parse_cpulist
from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.numa import probe_numa

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("lscpu") is None,
    reason="needs Linux with util-linux lscpu",
)


Live = tuple[CpuInfo, tuple[NumaNode, ...], IssueLog]


def lscpu_fields() -> dict[str, str]:
    """`lscpu -J` flattened (util-linux >= 2.37 nests fields under "children")."""
    data = json.loads(
        subprocess.run(["lscpu", "-J"], capture_output=True, text=True, check=True).stdout
    )
    fields: dict[str, str] = {}

    def walk(items: list[dict[str, Any]]) -> None:
        for item in items:
            fields[item["field"].rstrip(":").strip()] = item.get("data") or ""
            walk(item.get("children", []))

    walk(data["lscpu"])
    return fields


@pytest.fixture(scope="module")
def live() -> Live:
    issues = IssueLog()
    cpu = probe_cpu(Path("/"), issues)
    return cpu, probe_numa(Path("/"), issues, cpu), issues


def test_counts_agree_with_lscpu_and_nproc(live: Live) -> None:
    cpu, numa, _ = live
    fields = lscpu_fields()
    nproc_all = int(
        subprocess.run(["nproc", "--all"], capture_output=True, text=True, check=True).stdout
    )
    assert cpu.logical_cpus == int(fields["CPU(s)"]) == nproc_all
    assert cpu.online_cpus == parse_cpulist(fields["On-line CPU(s) list"])
    if fields.get("Socket(s)", "").isdigit():
        sockets = int(fields["Socket(s)"])
        assert cpu.sockets == sockets
        if not cpu.core_types:
            assert cpu.physical_cores == sockets * int(fields["Core(s) per socket"])
            assert cpu.threads_per_core == int(fields["Thread(s) per core"])
    if fields.get("NUMA node(s)", "").isdigit():
        assert len(numa) == int(fields["NUMA node(s)"])


def test_identity_agrees_with_lscpu(live: Live) -> None:
    cpu, _, _ = live
    fields = lscpu_fields()
    assert cpu.arch == fields["Architecture"]
    assert cpu.model_name == fields["Model name"]
    if cpu.arch == "x86_64":
        assert cpu.vendor == fields["Vendor ID"]
        assert (cpu.family, cpu.model) == (int(fields["CPU family"]), int(fields["Model"]))
    assert set(cpu.flags) == set(fields.get("Flags", "").split())
    assert cpu.hypervisor == (fields.get("Hypervisor vendor") or None)


def test_core_grouping_agrees_with_lscpu_p(live: Live) -> None:
    cpu, _, _ = live
    rows = subprocess.run(
        ["lscpu", "-p=CPU,CORE,SOCKET"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    theirs: dict[tuple[str, str], set[int]] = {}
    for row in rows:
        if row and not row.startswith("#"):
            number, core, socket = row.split(",")[:3]
            if core:  # offline CPUs have no core
                theirs.setdefault((socket, core), set()).add(int(number))
    ours: dict[int | None, set[int]] = {}
    for logical in cpu.topology:
        ours.setdefault(logical.core, set()).add(logical.cpu)
    assert sorted(map(sorted, theirs.values())) == sorted(map(sorted, ours.values()))


def test_microarch_is_told_here(live: Live) -> None:
    cpu, _, issues = live
    assert cpu.microarch is not None, cpu.microarch_basis
    assert not [i for i in issues if i.probe in ("cpu", "numa")]
