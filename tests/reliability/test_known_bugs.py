"""Reproducers of the bugs this suite found (tests/reliability/known_bugs.py), one per bug.

A bug still open carries `@xfail_known(id)` (strict xfail while it is listed in KNOWN_BUGS);
once fixed, the marker goes, the entry moves to FIXED_BUGS, and the reproducer stays here (or
beside the area's tests) as a regression test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hwtune.errors import ApplyError, ConfigError, HwtuneError, KnowledgeError
from hwtune.models.cpulist import CpuListError
from hwtune.models.hardware import CpuInfo, Memory
from hwtune.probes.elf import ElfError
from hwtune.probes.issues import IssueLog

from .known_bugs import is_huge_int_error


def test_huge_launcher_variable_is_a_config_error() -> None:
    from hwtune.pipeline.ranks import local_rank

    with pytest.raises(ConfigError):
        local_rank({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "9" * 5000})


def test_negative_cgroup_v2_quota_is_not_a_limit(tmp_path: Path) -> None:
    from hwtune.probes.limits import probe_limits

    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/job\n")
    (tmp_path / "proc/self/mountinfo").write_text(
        "35 25 0:30 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw\n"
    )
    (tmp_path / "proc/self/status").write_text("Cpus_allowed_list:\t0-3\n")
    (tmp_path / "sys/fs/cgroup/job").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/job/cpu.max").write_text("-1 100000\n")
    limits = probe_limits(
        tmp_path,
        IssueLog(),
        CpuInfo(logical_cpus=4, online_cpus=(0, 1, 2, 3)),
        Memory(),
        live=False,
    )
    assert limits.cpu_quota is None or limits.cpu_quota > 0
    assert limits.effective_cpus == 4


# Numbers beyond any machine word: int() refuses strings of more than 4,300 digits with a bare
# ValueError (Python >= 3.11, sys.get_int_max_str_digits), and an int too large for a float
# makes true division and float() overflow. Found by the long run in nine parsers; each must
# end in its documented outcome (a typed error, None, or an issue), never in that exception.
HUGE = "9" * 5000
BIG_FLOAT = "9" * 400  # parses as a float of inf


def _parsers() -> dict[str, Callable[[Path], object]]:
    from hwtune.knowledge import clear_cache, load_table
    from hwtune.models.cpulist import parse_cpulist
    from hwtune.pipeline.config import parse_config_text
    from hwtune.probes.cgroup_text import parse_cfs_quota, parse_cpu_max, parse_proc_cgroup
    from hwtune.probes.elf import read_needed
    from hwtune.probes.gpu import GpuEntry
    from hwtune.probes.lscpu import lscpu_topology, parse_lscpu
    from hwtune.probes.memory import parse_meminfo
    from hwtune.probes.numa import parse_node_meminfo
    from hwtune.probes.nvidia_smi import parse_size, parse_smi_xml
    from hwtune.probes.nvidia_topo import parse_topo
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
            f"\tGPU0\tCPU Affinity\nGPU{HUGE}\tX\t0-1\n", "t", IssueLog()
        ),
        "topo NVLink count": lambda tmp: parse_topo(
            f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\tX\tNV{HUGE}\t0-1\n", "t", IssueLog()
        ),
        "smi memory size": lambda tmp: parse_size(f"{BIG_FLOAT} MiB"),
        "smi attached_gpus": lambda tmp: parse_smi_xml(
            f"<nvidia_smi_log><attached_gpus>{HUGE}</attached_gpus></nvidia_smi_log>".encode(),
            "x.xml",
            IssueLog(),
        ),
        "lscpu number": lambda tmp: parse_lscpu(f"CPU(s): {HUGE}\n").number("CPU(s)"),
        "lscpu -p cell": lambda tmp: parse_lscpu(f"# CPU,Core,Socket,Node\n{HUGE},0,0,0\n"),
        "lscpu NUMA key": lambda tmp: parse_lscpu(f"NUMA node{HUGE} CPU(s): 0-1\n"),
        "lscpu cache size": lambda tmp: parse_lscpu(f"L2 cache: {BIG_FLOAT} MiB (1 instance)\n"),
        "lscpu cache count": lambda tmp: parse_lscpu(f"L2 cache: 1 MiB ({HUGE} instances)\n"),
        "lscpu cache size not a number": lambda tmp: parse_lscpu("L2 cache: 1.2.3 MiB\n"),
        "sysfs cache size": sysfs,
        "cgroup v1 quota": lambda tmp: parse_cfs_quota("1" + "0" * 400, "1"),
        "/proc/self/cgroup hierarchy": lambda tmp: parse_proc_cgroup(
            f"{HUGE}:cpu:/\n", IssueLog()
        ),
        "lscpu CPU(s) beyond any machine": lambda tmp: lscpu_topology(
            parse_lscpu("CPU(s): 4294967296\n"), IssueLog()
        ),
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


# Unicode digits: str.isdigit() is True for '²' and '①', which int() refuses with a bare
# ValueError, and for '٣' (Arabic-Indic three), which int() reads as 3 although no kernel
# file, tool or launcher writes it. Found by the long run in the lscpu `-p` parser; the same
# check was in a dozen more places (hwtune/models/digits.py is now the one test). Each reader must
# read none of these as a number, and raise nothing but its documented error.
UNICODE_DIGITS = {
    "superscript": "²",
    "circled": "①",
    "arabic-indic": "٣",
    "digit-superscript": "1²",
}
by_token = pytest.mark.parametrize(
    "token", list(UNICODE_DIGITS.values()), ids=list(UNICODE_DIGITS)
)


def _digit_readers() -> dict[str, Callable[[str, Path], object]]:
    """Each reader returns what it read from the token: None (or nothing) when not a number."""
    from dataclasses import replace

    from hwtune.apply.render import thread_counts
    from hwtune.daemon.inputs import plan_inputs
    from hwtune.daemon.sdnotify import watchdog_interval
    from hwtune.models.cpulist import parse_cpulist
    from hwtune.models.profile import Setting
    from hwtune.pipeline.ranks import local_rank
    from hwtune.planner import plan
    from hwtune.probes.cgroup_text import parse_proc_cgroup
    from hwtune.probes.lscpu import parse_lscpu
    from hwtune.probes.memory import parse_meminfo
    from hwtune.probes.numa import parse_node_meminfo
    from hwtune.probes.nvidia_smi import parse_size, parse_smi_xml
    from hwtune.probes.nvidia_topo import parse_topo
    from hwtune.probes.sysfs_cpu import read_sysfs_cpu
    from hwtune.probes.tf_knowledge import parse_version
    from tests.plan_builders import make_hardware

    def lscpu_rows(token: str, row: str) -> object:
        """The numbers read from a `-p` row other than its CPU 0 and core 0."""
        rows = parse_lscpu(f"# CPU,Core\n{row.format(token)}\n").rows
        return [n for r in rows for n in (r.cpu, r.core) if n not in (0, None)] or None

    def lscpu_cache(text: str) -> object:
        return [(c.size_bytes, c.instances) for c in parse_lscpu(text).caches] or None

    def sysfs(token: str, tmp: Path) -> object:
        cpus = tmp / "sys/devices/system/cpu"
        for name in ("cpu0", f"cpu{token}"):
            (cpus / name / "cache/index0").mkdir(parents=True)
        (cpus / "online").write_text("0\n")
        cache = cpus / "cpu0/cache/index0"
        for name, value in (
            ("size", f"{token}K"),
            ("level", "1"),
            ("type", "Data"),
            ("shared_cpu_list", "0"),
        ):
            (cache / name).write_text(value + "\n")
        facts = read_sysfs_cpu(tmp)
        assert facts is not None
        read = [c.size_bytes for c in facts.caches if c.size_bytes is not None]
        return read + [c for c in facts.cpu_dirs if c != 0] or None

    def daemon_nodes(token: str, tmp: Path) -> object:
        nodes = tmp / "sys/devices/system/node"
        for name in ("node0", f"node{token}"):
            (nodes / name).mkdir(parents=True)
            (nodes / name / "cpulist").write_text("0\n")
        inputs = plan_inputs(tmp, live=False, config_files=())
        return [p.path for i in inputs for p in i.parts if token in str(p.path)] or None

    def smi_attached(token: str, tmp: Path) -> object:
        issues = IssueLog()
        parse_smi_xml(
            f"<nvidia_smi_log><attached_gpus>{token}</attached_gpus></nvidia_smi_log>".encode(),
            "x.xml",
            issues,
        )
        return [i.reason for i in issues if "attached_gpus> says" in i.reason] or None

    def topo(text: str) -> object:
        # GPU0, no NUMA node and no NVLinks is what the texts say apart from the token.
        rows = parse_topo(text, "t", IssueLog()).rows
        read = [r.index for r in rows if r.index != 0]
        read += [r.numa_node for r in rows if r.numa_node is not None]
        return read + [link.nvlinks for r in rows for link in r.links if link.nvlinks] or None

    def thread_count(token: str, tmp: Path) -> object:
        profile = plan(make_hardware())
        threads = replace(profile.threads, intra_op=Setting(token, "from a profile.json"))
        return thread_counts(replace(profile, threads=threads))[0]

    return {
        "lscpu summary number": lambda t, tmp: parse_lscpu(f"CPU(s): {t}\n").number("CPU(s)"),
        "lscpu -p CPU column": lambda t, tmp: lscpu_rows(t, "{},0"),
        "lscpu -p Core column": lambda t, tmp: lscpu_rows(t, "0,{}"),
        "lscpu NUMA key": lambda t, tmp: (
            list(parse_lscpu(f"NUMA node{t} CPU(s): 0\n").numa) or None
        ),
        "lscpu cache size": lambda t, tmp: lscpu_cache(f"L2 cache: {t} MiB (1 instance)\n"),
        "lscpu cache count": lambda t, tmp: lscpu_cache(f"L2 cache: 1 MiB ({t} instances)\n"),
        "meminfo": lambda t, tmp: parse_meminfo(f"MemTotal: {t} kB\n", IssueLog()) or None,
        "NUMA node meminfo": lambda t, tmp: parse_node_meminfo(f"Node 0 MemTotal: {t} kB"),
        "/proc/self/cgroup hierarchy": lambda t, tmp: (
            parse_proc_cgroup(f"{t}:cpu:/\n", IssueLog()) or None
        ),
        "sysfs cache size and CPU directories": sysfs,
        "nvidia-smi size": lambda t, tmp: parse_size(f"{t} MiB"),
        "nvidia-smi attached_gpus": smi_attached,
        "nvidia-smi topo GPU index": lambda t, tmp: topo(f"\tGPU0\tCPU Affinity\nGPU{t}\tX\t0\n"),
        "nvidia-smi topo NVLink count": lambda t, tmp: topo(
            f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\tX\tNV{t}\t0\n"
        ),
        "nvidia-smi topo NUMA column": lambda t, tmp: topo(
            f"\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\tX\t0\t{t}\n"
        ),
        "TensorFlow version": lambda t, tmp: parse_version(f"{t}.1"),
        "cpulist": lambda t, tmp: parse_cpulist(t),
        "launcher rank variable": lambda t, tmp: local_rank(
            {"LOCAL_RANK": t, "LOCAL_WORLD_SIZE": "4"}
        ),
        "WATCHDOG_USEC": lambda t, tmp: watchdog_interval({"WATCHDOG_USEC": t}),
        "profile thread count": thread_count,
        "daemon NUMA node inputs": daemon_nodes,
    }


_DIGITS_DOCUMENTED: dict[str, tuple[type[BaseException], ...]] = {
    "cpulist": (CpuListError,),
    "launcher rank variable": (ConfigError,),
    "profile thread count": (ApplyError,),
}


@by_token
@pytest.mark.parametrize("reader", sorted(_digit_readers()))
def test_unicode_digits_are_not_numbers(reader: str, token: str, tmp_path: Path) -> None:
    try:
        read = _digit_readers()[reader](token, tmp_path)
    except _DIGITS_DOCUMENTED.get(reader, ()) as err:
        assert str(err), f"{reader}: {type(err).__name__} without a message"
        return
    assert read is None, f"{reader} read {token!r} as {read!r}"


@by_token
def test_compute_capability_with_unicode_digits_plans(token: str) -> None:
    """A GPU's compute capability (from hardware.json, `plan --hardware`) goes through the
    planner's version_tuple(), which still tests characters with str.isdigit()."""
    from hwtune.planner import plan
    from hwtune.planner.knowledge import version_tuple
    from tests.plan_builders import make_gpus, make_hardware

    plan(make_hardware(gpus=make_gpus(1, cc=f"7.{token}")))  # no ValueError traceback
    assert version_tuple(f"7.{token}") == ((7, 1) if token[0] == "1" else (7,))
