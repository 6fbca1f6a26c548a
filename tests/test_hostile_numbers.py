"""Numbers in kernel and tool files as the kernel writes them: ASCII digits, below 2**64.

int() also takes "٥٠٠٠٠" (Arabic-Indic digits), "5_0000", "+100000" and thousands of digits;
no kernel file holds any of them. Each such value is an issue naming its file, and whatever
`detect --json` writes from a hostile tree is read back by `plan --hardware` (which reads
numbers of at most 20 digits, pipeline/request.py MAX_NUMBER_DIGITS).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwtune.probes.cgroup_text import parse_cfs_quota, parse_cpu_max, parse_memory_limit
from tests.conftest import run_cli
from tests.test_limits import limits, v1_tree, v2_tree
from tests.test_probe_cpu_sysfs import CPU, NODE, machine, probe, write

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


SMI = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>550.54</driver_version><attached_gpus>1</attached_gpus>
<gpu id="00000000:07:00.0"><product_name>NVIDIA A100-SXM4-40GB</product_name>
<fb_memory_usage><total>999999999999999999 TiB</total></fb_memory_usage>
<numa_node>999999999999999999</numa_node></gpu></nvidia_smi_log>
"""


def _hostile(root: Path, kind: str) -> Path:
    if kind == "cgroup-v2":
        v2_tree(root)
        (root / POD / "memory.max").write_text("9" * 30 + "\n")
        (root / POD / "cpu.max").write_text("٥٠٠٠٠ 100000\n")
    elif kind == "cgroup-v1":
        v1_tree(root, quota="5_0000", memory="+100000\n")
    elif kind == "cgroup-v2-zero":  # 0: no quota or limit the kernel wrote for this process
        v2_tree(root)
        (root / POD / "memory.max").write_text("0\n")
        (root / POD / "cpu.max").write_text("0 100000\n")
    elif kind == "cgroup-v1-zero":
        v1_tree(root, quota="0", memory="0\n")
    elif kind == "meminfo-zero":
        machine(root, [(0, core, [core]) for core in range(2)])
        write(root, "proc/meminfo", "MemTotal:       0 kB\nMemAvailable:   0 kB")
    elif kind == "sysfs":
        machine(root, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1, 2, 3]})
        write(root, f"{CPU}/cpu2/topology/physical_package_id", "9" * 30)
        write(root, f"{CPU}/cpu1/topology/core_id", "٣")
        write(root, f"{CPU}/cpu0/cache/index3/size", "9" * 18 + "G")
        write(root, f"{NODE}/node0/meminfo", f"Node 0 MemTotal: {'9' * 20} kB")
        write(root, f"{NODE}/node0/distance", "1" * 30)
        write(root, f"{NODE}/node{'9' * 200}/cpulist", "")
        write(root, "proc/meminfo", f"MemTotal: {'9' * 20} kB\nMemAvailable: 1 kB\n")
    elif kind == "cpuinfo":
        write(
            root,
            "proc/cpuinfo",
            "\n\n".join(
                f"processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: {'9' * 30}\n"
                f"model\t\t: ٥\nstepping\t: +1\nphysical id\t: 0\ncore id\t\t: {n}\n"
                "siblings\t: 2\ncpu cores\t: 2\nflags\t\t: fpu sse sse2"
                for n in range(2)
            ),
        )
    elif kind == "cpu-dirs":  # no `online`: the cpuN directories are the CPUs
        machine(root, [(0, core, [core]) for core in range(4)], nodes={0: [0, 1, 2, 3]})
        (root / CPU / "online").unlink()
        for name in ("70000", "9" * 11, "9" * 250):
            write(root, f"{CPU}/cpu{name}/topology/core_id", "0")
            write(root, f"{CPU}/cpu{name}/topology/physical_package_id", "0")
    elif kind == "cpu-strings":  # 3 Mi emoji, each a 12-byte escape in JSON
        machine(root, [(0, core, [core]) for core in range(2)])
        huge = "\U0001f600" * (3 << 20)
        write(root, "proc/cpuinfo", f"processor\t: 0\nvendor_id\t: {huge}\nmodel name\t: {huge}")
        write(root, "lscpu.txt", f"Architecture: x86_64\nModel name: {huge}\nFlags: {huge}")
    elif kind == "nvidia-smi":
        machine(root, [(0, core, [core]) for core in range(2)])
        (root / "nvidia-smi-q.xml").write_text(SMI)
    return root


@pytest.mark.parametrize(
    "kind",
    [
        "cgroup-v2",
        "cgroup-v1",
        "cgroup-v2-zero",
        "cgroup-v1-zero",
        "meminfo-zero",
        "sysfs",
        "cpuinfo",
        "cpu-dirs",
        "cpu-strings",
        "nvidia-smi",
    ],
)
def test_what_detect_writes_from_a_hostile_tree_plan_reads_back(kind: str, tmp_path: Path) -> None:
    """Before: numbers of 23 to 31 digits (memory.max of 30 nines, 10^30 bytes of GPU memory,
    a node meminfo of 20 digits of kB), so `plan --hardware` refused detect's own output; and
    a cpuinfo or lscpu model name of 12 MB of emoji, 37 MB once escaped in the JSON; and a
    sysfs directory cpu999...9 (250 digits) taken as an online CPU; a cgroup quota or memory
    limit of 0, or a MemTotal of 0 kB, read as 0 CPUs or 0 bytes, which `plan --hardware`
    refuses."""
    root = _hostile(tmp_path / "root", kind)
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    detected = run_cli(["detect", "--root", str(root), "--json", "--no-tensorflow"], environ)
    assert detected.exit_status in (0, 2), detected.stderr
    model = json.loads(detected.stdout)
    assert model["issues"], "a hostile value said nothing"
    (tmp_path / "hw.json").write_text(detected.stdout)
    planned = run_cli(["plan", "--hardware", str(tmp_path / "hw.json")], environ)
    assert planned.exit_status == 0, planned.stderr


def test_an_overlong_gpu_string_is_an_issue_and_plan_reads_detects_output_back(
    tmp_path: Path,
) -> None:
    """Before: a <product_name> of 3 Mi emoji (12 MB of XML, under the 16 MiB cap) was matched
    against every pattern of the gpus table (6 s) and written whole into `detect --json`, where
    each emoji became a 12-byte escape: 37 MB, which `plan --hardware` refused as too large."""
    root = tmp_path / "root"
    machine(root, [(0, core, [core]) for core in range(2)])
    name = "\U0001f600" * (3 << 20)
    (root / "nvidia-smi-q.xml").write_text(
        SMI.replace("NVIDIA A100-SXM4-40GB", name).replace("550.54", "5" * 200)
    )
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    detected = run_cli(["detect", "--root", str(root), "--json", "--no-tensorflow"], environ)
    assert detected.exit_status in (0, 2), detected.stderr
    model = json.loads(detected.stdout)
    said = [(i["path"], i["reason"]) for i in model["issues"]]
    for what in ("GPU 0 <product_name> is 3145728 characters", "<driver_version> is 200"):
        assert any(p == "nvidia-smi-q.xml" and what in r for p, r in said), said
    assert model["gpus"][0]["name"] == "GPU 0" and model["gpu_driver"] is None, model["gpus"]
    (tmp_path / "hw.json").write_text(detected.stdout)
    planned = run_cli(["plan", "--hardware", str(tmp_path / "hw.json")], environ)
    assert planned.exit_status == 0, planned.stderr
