"""Numbers in kernel and tool files as the kernel writes them: ASCII digits, below 2**64.

int() also takes "٥٠٠٠٠" (Arabic-Indic digits), "5_0000", "+100000" and thousands of digits;
no kernel file holds any of them. Each such value is an issue naming its file, and whatever
`detect --json` writes from a hostile tree is read back by `plan --hardware` (which reads
numbers of at most 20 digits, pipeline/request.py MAX_NUMBER_DIGITS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hwtune.probes.cgroup import parse_cfs_quota, parse_cpu_max, parse_memory_limit
from tests.test_limits import limits, v1_tree, v2_tree
from tests.test_probe_cpu_sysfs import CPU, machine, probe, write

GARBAGE = ["٥٠٠٠٠", "5_0000", "+100000", "9" * 30, "1" * 5000]
POD = "sys/fs/cgroup/kubepods/pod1"


@pytest.mark.parametrize("text", GARBAGE)
def test_cgroup_parsers_take_ascii_digits_below_2_to_the_64(text: str) -> None:
    with pytest.raises(ValueError):
        parse_memory_limit(text, 2)
    with pytest.raises(ValueError):
        parse_memory_limit(text, 1)
    with pytest.raises(ValueError):
        parse_cpu_max(f"{text} 100000")
    with pytest.raises(ValueError):
        parse_cpu_max(f"50000 {text}")
    with pytest.raises(ValueError):
        parse_cfs_quota(text, "100000")
    with pytest.raises(ValueError):
        parse_cfs_quota("50000", text)


def test_the_numbers_the_kernel_writes_still_parse() -> None:
    assert parse_memory_limit("18446744073709551615", 2) == (1 << 64) - 1
    assert parse_memory_limit("9223372036854771712", 1) is None  # v1 "unlimited"
    assert parse_cfs_quota("-1", "100000") is None
    assert parse_cpu_max("150000 100000") == 1.5


@pytest.mark.parametrize("text", GARBAGE)
def test_a_garbage_cgroup_number_is_an_issue_naming_the_file(text: str, tmp_path: Path) -> None:
    """Before: memory.max of 30 nines was a limit of 10^30 bytes (more digits than plan
    --hardware reads), and "٥٠٠٠٠" in cpu.max a quota of 0.5 CPUs."""
    v2_tree(tmp_path)
    (tmp_path / POD / "memory.max").write_text(text + "\n")
    (tmp_path / POD / "cpu.max").write_text(f"{text} 100000\n")
    hw, issues = limits(tmp_path)
    assert hw.memory_limit_bytes is None and hw.cpu_quota is None
    assert {f"{POD}/memory.max", f"{POD}/cpu.max"} <= {i.path for i in issues}
    v1 = tmp_path / "v1"
    v1_tree(v1, quota=text, memory=text + "\n")
    hw, issues = limits(v1)
    assert hw.memory_limit_bytes is None and hw.cpu_quota is None
    assert {
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
    } <= {i.path for i in issues}


@pytest.mark.parametrize("text", GARBAGE)
def test_a_garbage_sysfs_id_is_an_issue_naming_the_file(text: str, tmp_path: Path) -> None:
    machine(tmp_path, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1, 2, 3]})
    write(tmp_path, f"{CPU}/cpu2/topology/physical_package_id", text)
    _, _, issues = probe(tmp_path)
    said = "\n".join(issues)
    assert f"{CPU}/cpu2/topology/physical_package_id: not a number" in said, said
