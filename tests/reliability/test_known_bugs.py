"""Reproducers of the bugs this suite found (tests/reliability/known_bugs.py), one per bug.

A bug still open carries `@xfail_known(id)` (strict xfail while it is listed in KNOWN_BUGS);
once fixed, the marker goes, the entry moves to FIXED_BUGS, and the reproducer stays here (or
beside the area's tests) as a regression test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hwtune.cpulist import CpuListError
from hwtune.errors import ConfigError, HwtuneError, KnowledgeError
from hwtune.models.hardware import CpuInfo, Memory
from hwtune.probes.elf import ElfError
from hwtune.probes.issues import IssueLog

from .known_bugs import is_huge_int_error


def test_huge_launcher_variable_is_a_config_error() -> None:
    from hwtune.ranks import local_rank

    with pytest.raises(ConfigError):
        local_rank({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "9" * 5000})


def test_negative_cgroup_v2_quota_is_not_a_limit(tmp_path: Path) -> None:
    from hwtune.probes.limits import probe_limits

    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/job\n")
    (tmp_path / "proc/self/mountinfo").write_text(
        "35 25 0:30 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw\n")
    (tmp_path / "proc/self/status").write_text("Cpus_allowed_list:\t0-3\n")
    (tmp_path / "sys/fs/cgroup/job").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/job/cpu.max").write_text("-1 100000\n")
    limits = probe_limits(tmp_path, IssueLog(), CpuInfo(logical_cpus=4, online_cpus=(0, 1, 2, 3)),
                          Memory(), live=False)
    assert limits.cpu_quota is None or limits.cpu_quota > 0
    assert limits.effective_cpus == 4


# Numbers beyond any machine word: int() refuses strings of more than 4,300 digits with a bare
# ValueError (Python >= 3.11, sys.get_int_max_str_digits), and an int too large for a float
# makes true division and float() overflow. Found by the long run in nine parsers; each must
# end in its documented outcome (a typed error, None, or an issue), never in that exception.
HUGE = "9" * 5000
BIG_FLOAT = "9" * 400  # parses as a float of inf


def _parsers() -> dict[str, Callable[[Path], object]]:
    from hwtune.config import parse_config_text
    from hwtune.cpulist import parse_cpulist
    from hwtune.knowledge import clear_cache, load_table
    from hwtune.probes.cgroup import parse_cfs_quota, parse_cpu_max, parse_proc_cgroup
    from hwtune.probes.elf import read_needed
    from hwtune.probes.gpu import GpuEntry
    from hwtune.probes.lscpu import lscpu_topology, parse_lscpu
    from hwtune.probes.memory import parse_meminfo
    from hwtune.probes.numa import parse_node_meminfo
    from hwtune.probes.nvidia_smi import parse_size, parse_smi_xml, parse_topo
    from hwtune.probes.sysfs_cpu import read_sysfs_cpu

    def knowledge(tmp: Path) -> object:
        (tmp / "gpus.json").write_text('{"entries": [' + HUGE + "]}")
        clear_cache()
        try:
            return load_table("gpus", GpuEntry, extra_dirs=(tmp,))
        finally:
            clear_cache()

    def elf(tmp: Path) -> object:
        # A 64-bit ELF header whose program header table lies at offset 2^63.
        header = bytearray(64)
        header[:7] = b"\x7fELF\x02\x01\x01"
        header[32:40] = (1 << 63).to_bytes(8, "little")  # e_phoff
        header[54:56] = (56).to_bytes(2, "little")  # e_phentsize
        header[56:58] = (1).to_bytes(2, "little")  # e_phnum
        (tmp / "lib.so").write_bytes(bytes(header))
        return read_needed(tmp / "lib.so")

    def sysfs(tmp: Path) -> object:
        cache = tmp / "sys/devices/system/cpu/cpu0/cache/index0"
        cache.mkdir(parents=True)
        (tmp / "sys/devices/system/cpu/online").write_text("0\n")
        (cache / "size").write_text(HUGE + "K\n")
        (cache / "level").write_text("1\n")
        (cache / "type").write_text("Data\n")
        (cache / "shared_cpu_list").write_text("0\n")
        return read_sysfs_cpu(tmp)

    return {
        "cpulist": lambda tmp: parse_cpulist(HUGE),
        "meminfo": lambda tmp: parse_meminfo(f"MemTotal: {HUGE} kB\n", IssueLog()),
        "numa node meminfo": lambda tmp: parse_node_meminfo(f"Node 0 MemTotal: {HUGE} kB"),
        "topo GPU index": lambda tmp: parse_topo(
            f"\tGPU0\tCPU Affinity\nGPU{HUGE}\tX\t0-1\n", "t", IssueLog()),
        "topo NVLink count": lambda tmp: parse_topo(
            f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\tX\tNV{HUGE}\t0-1\n", "t", IssueLog()),
        "smi memory size": lambda tmp: parse_size(f"{BIG_FLOAT} MiB"),
        "smi attached_gpus": lambda tmp: parse_smi_xml(
            f"<nvidia_smi_log><attached_gpus>{HUGE}</attached_gpus></nvidia_smi_log>".encode(),
            "x.xml", IssueLog()),
        "lscpu number": lambda tmp: parse_lscpu(f"CPU(s): {HUGE}\n").number("CPU(s)"),
        "lscpu -p cell": lambda tmp: parse_lscpu(f"# CPU,Core,Socket,Node\n{HUGE},0,0,0\n"),
        "lscpu NUMA key": lambda tmp: parse_lscpu(f"NUMA node{HUGE} CPU(s): 0-1\n"),
        "lscpu cache size": lambda tmp: parse_lscpu(f"L2 cache: {BIG_FLOAT} MiB (1 instance)\n"),
        "lscpu cache count": lambda tmp: parse_lscpu(f"L2 cache: 1 MiB ({HUGE} instances)\n"),
        "lscpu cache size not a number": lambda tmp: parse_lscpu("L2 cache: 1.2.3 MiB\n"),
        "sysfs cache size": sysfs,
        "cgroup v1 quota": lambda tmp: parse_cfs_quota("1" + "0" * 400, "1"),
        "/proc/self/cgroup hierarchy": lambda tmp: parse_proc_cgroup(f"{HUGE}:cpu:/\n",
                                                                      IssueLog()),
        "lscpu CPU(s) beyond any machine": lambda tmp: lscpu_topology(
            parse_lscpu("CPU(s): 4294967296\n"), IssueLog()),
        "cgroup v2 cpu.max": lambda tmp: parse_cpu_max("1" + "0" * 400 + " 1"),
        "knowledge JSON": knowledge,
        "TOML config": lambda tmp: parse_config_text(f"instances = {HUGE}\n", "config.toml"),
        "ELF offset": elf,
    }


# What each may raise: its documented error (the cgroup helpers' ValueError is what
# read_cgroup_limits turns into an issue naming the file).
_DOCUMENTED: dict[str, tuple[type[BaseException], ...]] = {
    "cpulist": (CpuListError,),
    "cgroup v1 quota": (ValueError,),
    "cgroup v2 cpu.max": (ValueError,),
    "knowledge JSON": (KnowledgeError,),
    "TOML config": (ConfigError,),
    "ELF offset": (ElfError,),
}


@pytest.mark.parametrize("parser", sorted(_parsers()))
def test_numbers_beyond_any_machine_word(parser: str, tmp_path: Path) -> None:
    documented = _DOCUMENTED.get(parser, ())
    try:
        _parsers()[parser](tmp_path)
    except documented as err:
        leaked = is_huge_int_error(err) and not isinstance(err, HwtuneError)
        if parser.startswith("cgroup"):  # their ValueError is documented; read_* catches it
            leaked = isinstance(err, OverflowError)
        assert not leaked, f"{parser}: the bare int()/float error leaked"
        assert str(err)
