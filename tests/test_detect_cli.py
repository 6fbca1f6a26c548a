"""`hwtune detect`: JSON contract, the summary, --strict, --root, and what it imports."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.errors import HwtuneError
from hwtune.models.convert import dumps_json
from hwtune.models.hardware import (
    CoreType,
    CpuInfo,
    Gpu,
    GpuLink,
    Hardware,
    Limits,
    Memory,
    ProbeIssue,
    TensorFlowInfo,
)
from hwtune.probes.report import (
    MAX_CLIQUE_STEPS,
    isa_summary,
    nvlink_cliques,
    render_summary,
)
from hwtune.status import ExitStatus

from .conftest import REPO, run_cli
from .gpu_roots import HASWELL, K80_LIST, root

FAST = ["--no-gpu", "--no-tensorflow"]
# Imports that would blow the 150 ms start-up budget of `hwtune detect --json`.
HEAVY = ("pydantic", "psutil", "tensorflow", "cpuinfo")


def require_probes(*names: str) -> None:
    missing = [n for n in names if importlib.util.find_spec(f"hwtune.probes.{n}") is None]
    if missing:
        pytest.skip(f"hwtune.probes.{', '.join(missing)} (other parts of issue 2) not written yet")


@pytest.fixture
def cpuinfo_only(tmp_path: Path) -> Path:
    """A root holding nothing but this machine's /proc/cpuinfo."""
    (tmp_path / "proc").mkdir()
    shutil.copyfile("/proc/cpuinfo", tmp_path / "proc/cpuinfo")
    return tmp_path


def test_json_holds_the_contract_keys() -> None:
    require_probes("cpu", "numa")
    result = run_cli(["detect", "--json", *FAST])
    assert result.exit_status == 0, result.stderr
    hw = json.loads(result.stdout)
    for key in (
        "vendor",
        "model_name",
        "arch",
        "microarch",
        "x86_64_level",
        "flags",
        "sockets",
        "physical_cores",
        "logical_cpus",
        "threads_per_core",
        "core_types",
    ):
        assert key in hw["cpu"]
    for key in ("affinity_cpus", "cpuset_cpus", "cpu_quota", "effective_cpus", "memory_bytes"):
        assert key in hw["limits"]
    assert hw["cpu"]["flags"] == sorted(hw["cpu"]["flags"])
    assert hw["limits"]["effective_cpus"] >= 1
    assert isinstance(hw["numa"], list) and isinstance(hw["issues"], list)
    assert hw["tensorflow"] is None and hw["gpus"] == []  # skipped by the flags


def test_summary_on_this_machine() -> None:
    require_probes("cpu", "numa")
    result = run_cli(["detect", *FAST])
    assert result.exit_status == 0, result.stderr
    labels = [line.split()[0] for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert labels[:6] == ["CPU", "ISA", "Topology", "Effective", "Memory", "GPUs"]
    assert "Issues" in labels


def test_strict_turns_issues_into_an_exit_status(cpuinfo_only: Path) -> None:
    require_probes("cpu", "numa")
    loose = run_cli(["detect", "--root", str(cpuinfo_only), "--json", *FAST])
    assert loose.exit_status == ExitStatus.SUCCESS
    issues = json.loads(loose.stdout)["issues"]
    assert {"proc/meminfo", "proc/self/status", "proc/self/cgroup"} <= {i["path"] for i in issues}
    strict = run_cli(["detect", "--root", str(cpuinfo_only), "--strict", *FAST])
    assert strict.exit_status == ExitStatus.ISSUES
    assert "Issues" in strict.stdout


def test_partial_root_keeps_the_cpu_facts(cpuinfo_only: Path) -> None:
    require_probes("cpu", "numa")
    hw = json.loads(run_cli(["detect", "--root", str(cpuinfo_only), "--json", *FAST]).stdout)
    logical = Path("/proc/cpuinfo").read_text().count("\nprocessor") + 1
    assert hw["cpu"]["logical_cpus"] == logical
    assert hw["limits"]["effective_cpus"] == logical  # no status, no cgroup: nothing narrows
    assert hw["root"] == str(cpuinfo_only)


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    result = run_cli(["detect", "--root", str(tmp_path / "nowhere")])
    assert result.exit_status == ExitStatus.ERROR
    assert "not a directory" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_detect_imports_nothing_heavy() -> None:
    require_probes("cpu", "numa", "gpu", "tensorflow")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "hwtune", "detect", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    json.loads(done.stdout)
    # -X importtime lines: "import time: self [us] | cumulative | imported package"
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "hwtune" in imported  # the parse is seeing real lines
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


# --- the summary, as a pure function of Hardware ---------------------------------------------


def a100s() -> tuple[Gpu, ...]:
    """Two NVLink islands of four GPUs each, the way a p4d-like box without NVSwitch looks."""
    gpus = []
    for i in range(8):
        island = range(0, 4) if i < 4 else range(4, 8)
        peers = tuple(p for p in island if p != i)
        gpus.append(
            Gpu(
                index=i,
                name="NVIDIA A100-SXM4-40GB",
                compute_capability="8.0",
                architecture="Ampere",
                memory_bytes=40 << 30,
                numa_node=i // 4,
                nvlink_peers=peers,
                links=tuple(GpuLink(peer=p, kind="NV12", nvlinks=12) for p in peers),
            )
        )
    return tuple(gpus)


def example() -> Hardware:
    return Hardware(
        cpu=CpuInfo(
            arch="x86_64",
            vendor="GenuineIntel",
            model_name="Intel Xeon Platinum 8481C",
            microarch="sapphirerapids",
            x86_64_level=4,
            flags=("amx_bf16", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "fma"),
            sockets=2,
            physical_cores=88,
            logical_cpus=176,
            threads_per_core=2,
            smt_enabled=True,
            hypervisor="KVM",
        ),
        limits=Limits(
            usable_cpus=tuple(range(176)),
            effective_cpus=4,
            cpu_quota=4.0,
            cgroup_version=2,
            cgroup_path="/kubepods/pod1",
            effective_cpus_reason="cgroup quota 4 CPUs (cpu.max) < 176 usable CPUs",
            memory_limit_bytes=8 << 30,
        ),
        memory=Memory(
            total_bytes=64 << 30, available_bytes=60 << 30, transparent_hugepages="madvise"
        ),
        gpus=a100s(),
        gpu_driver="550.54.15",
        cuda_driver_version="12.4",
        gpu_source="nvml",
        tensorflow=TensorFlowInfo(
            version="2.21.0",
            distribution="tensorflow",
            threading_runtime="eigen",
            missing_isa=("amx_tile", "avx512_bf16"),
            compiled_isa=("avx", "avx2"),
        ),
        issues=(ProbeIssue("cpuinfo", "odd line", path="proc/cpuinfo", line=7),),
    )


def test_summary_names_what_matters() -> None:
    text = render_summary(example())
    cpu = "Intel Xeon Platinum 8481C (GenuineIntel, x86_64, sapphirerapids, x86-64-v4, on KVM)"
    assert f"CPU         {cpu}" in text
    assert "AVX-512 (F BF16)" in text and "AMX (TILE BF16)" in text
    assert "2 sockets · 88 cores · 176 logical CPUs (2 threads/core, SMT on)" in text
    assert "4 CPUs — cgroup quota 4 CPUs (cpu.max) < 176 usable CPUs" in text
    assert "cgroup limit 8.0 GiB" in text and "THP madvise" in text
    assert "GPU 0" in text and "CC 8.0 (Ampere)" in text and "NV12 to GPU 1-3" in text
    assert "cliques {0,1,2,3} {4,5,6,7}" in text
    assert "not built for this CPU's: amx_tile avx512_bf16" in text
    assert "cpuinfo: odd line [proc/cpuinfo:7]" in text


def test_summary_of_a_guest_that_does_not_say_whose() -> None:
    """Only the CPUID hypervisor bit (a cpuinfo without the clocksource or DMI files)."""
    guest = dataclasses.replace(
        example(), cpu=dataclasses.replace(example().cpu, hypervisor="unknown")
    )
    line = render_summary(guest).splitlines()[0]
    assert line.endswith("x86-64-v4, on an unknown hypervisor)"), line


def test_summary_of_an_empty_model_does_not_fail() -> None:
    text = render_summary(Hardware())
    assert "GPUs        none" in text and "TensorFlow  not found" in text
    assert "Issues      none" in text


def test_isa_summary_says_what_is_absent() -> None:
    assert isa_summary(CpuInfo(arch="x86_64", flags=("avx", "sse4_2"))) == (
        "SSE4.2 AVX · no AVX2, AVX-512, AMX"
    )
    assert isa_summary(CpuInfo(arch="aarch64", flags=("asimd", "sve", "bf16"))) == "NEON SVE BF16"


def test_nvlink_cliques() -> None:
    assert nvlink_cliques(a100s()) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    # A link reported by one side only still counts; a chain 0-1-2 is two cliques, not one.
    chain = (Gpu(0, "a", nvlink_peers=(1,)), Gpu(1, "b", nvlink_peers=(2,)), Gpu(2, "c"))
    assert nvlink_cliques(chain) == [(0, 1), (1, 2)]
    assert nvlink_cliques((Gpu(0, "solo"),)) == []


def test_nvlink_cliques_stay_fast_on_dense_and_hostile_matrices() -> None:
    """A fully linked fabric (a DGX-2 is 16 GPUs, NVIDIA/nccl-tests#78) is one clique found in
    linear steps; a matrix with exponentially many maximal cliques (every GPU linked to all but
    its pair: 2^(n/2) of them) stops at the step bound instead of hanging `detect`."""
    full = tuple(
        Gpu(i, "x", nvlink_peers=tuple(j for j in range(64) if j != i)) for i in range(64)
    )
    assert nvlink_cliques(full) == [tuple(range(64))]
    paired = tuple(
        Gpu(i, "x", nvlink_peers=tuple(j for j in range(80) if j not in (i, i ^ 1)))
        for i in range(80)
    )
    found = nvlink_cliques(paired)  # 2^40 maximal cliques exist; returns after the bound
    assert 0 < len(found) <= MAX_CLIQUE_STEPS
    assert all(len(clique) == 40 for clique in found)


# --- what a hostile machine or capture writes ------------------------------------------------


def control_characters(text: str) -> list[str]:
    """What would reach a terminal raw: anything not printable, line breaks aside."""
    return sorted({c for line in text.split("\n") for c in line if not c.isprintable()})


def test_summary_escapes_what_the_machine_wrote() -> None:
    """The model name, GPU names and cgroup paths come from /proc/cpuinfo, nvidia-smi and
    /proc/self/cgroup: an ESC sequence, \\r or \\b there rewrote the terminal."""
    hw = dataclasses.replace(
        example(),
        cpu=dataclasses.replace(example().cpu, model_name="Xeon\x1b[2J\x1b[31m\rEVIL\b"),
        gpus=(Gpu(0, "Tesla \x1b]0;pwned\x07T4"),),
        limits=dataclasses.replace(example().limits, cgroup_path="/pod\x1b[1A"),
        issues=(ProbeIssue("cgroup", "odd", path="sys/fs/cgroup/\x1b[2Kx"),),
    )
    text = render_summary(hw)
    assert control_characters(text) == []
    assert "Xeon\\x1b[2J\\x1b[31m\\rEVIL\\x08" in text
    assert "Tesla \\x1b]0;pwned\\x07T4" in text
    assert "/pod\\x1b[1A" in text and "[sys/fs/cgroup/\\x1b[2Kx]" in text


def test_plan_table_escapes_a_gpu_name(tmp_path: Path) -> None:
    """A GPU TensorFlow ignores is named in the plan's reasons, as nvidia-smi printed it."""
    listing = tmp_path / "k80.L"
    listing.write_text(K80_LIST.read_text().replace("Tesla K80", "Tesla K80\x1b[2J\x08"))
    result = run_cli(["plan", "--root", str(root(tmp_path, HASWELL, listing=listing))])
    assert result.exit_status == 0, result.stderr
    assert "Tesla K80\\x1b[2J\\x08" in result.stdout
    assert control_characters(result.stdout) == []


def test_isa_summary_uses_no_x86_names_elsewhere() -> None:
    armv7 = CpuInfo(arch="armv7l", flags=("half", "thumb", "vfp", "neon", "vfpv4", "idiva"))
    assert isa_summary(armv7) == "NEON VFPv4"
    power = CpuInfo(arch="ppc64le", flags=("altivec", "vsx"))
    assert isa_summary(power) == "2 flags; none tracked for ppc64le"


def test_json_never_holds_nan_or_infinity(tmp_path: Path) -> None:
    """`lscpu -p`'s MAXMHZ went through float(): "inf" came out of `detect --json` as Infinity,
    which is not JSON; the probe refuses it now, and the writer refuses any that slip past."""
    (tmp_path / "lscpu.txt").write_text(
        "# CPU,Core,Socket,Node,MAXMHZ\n0,0,0,0,inf\n1,1,0,0,1e400\n2,2,0,0,nan\n"
    )
    result = run_cli(["detect", "--root", str(tmp_path), "--json", *FAST])
    assert result.exit_status == 0, result.stderr

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in detect --json")

    hw = json.loads(result.stdout, parse_constant=refuse)
    assert hw["cpu"]["logical_cpus"] == 3
    bad = CpuInfo(core_types=(CoreType("performance", (0,), 1, max_mhz=float("nan")),))
    with pytest.raises(HwtuneError, match=r"cpu\.core_types\[0\]\.max_mhz is not a finite"):
        dumps_json(Hardware(cpu=bad), "detect --json")


def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback() -> None:
    """A real SIGINT that lands while `main` imports the subcommand's module."""
    script = (
        "import importlib, os, signal, sys\n"
        "import hwtune.cli as cli\n"
        "real = importlib.import_module\n"
        "def interrupted(name, *args):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args)\n"
        "cli.importlib.import_module = interrupted\n"
        "sys.exit(cli.main(['detect', '--json']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == ExitStatus.INTERRUPTED, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize("kind", ["file", "garbage planning table"])
def test_detect_says_when_the_knowledge_dir_is_one_plan_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """`hwtune plan` errors on these; detect exited 0 without a word where no probe read a
    table (a root with no CPU source) or the bad table is one only planning reads."""
    named = tmp_path / "knowledge"
    if kind == "file":
        named.write_text("")
        said = f"HWTUNE_KNOWLEDGE_DIR={named}: is not a directory"
    else:
        named.mkdir()
        (named / "tensorflow_versions.json").write_text("garbage\n")
        said = f"{named}/tensorflow_versions.json: line 1: invalid JSON"
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(named))
    from hwtune.planner.knowledge import reload_knowledge

    reload_knowledge()  # tables an earlier test loaded in this process are not re-read
    empty = tmp_path / "root"
    empty.mkdir()
    planned = run_cli(["plan", "--root", str(empty)])
    assert planned.exit_status == 1 and said in planned.stderr, planned.stderr
    shown = run_cli(["detect", "--root", str(empty), *FAST])
    assert shown.exit_status == 0 and f"knowledge: {said}" in shown.stdout, shown.stdout
    assert shown.stdout.count(said) == 1
    as_json = run_cli(["detect", "--root", str(empty), "--json", *FAST])
    issues = json.loads(as_json.stdout)["issues"]
    assert [i["probe"] for i in issues if said in i["reason"]] == ["knowledge"]
    strict = run_cli(["detect", "--root", str(empty), "--strict", *FAST])
    assert strict.exit_status == ExitStatus.ISSUES


def test_detect_names_an_unusable_knowledge_dir_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a probe already reports the directory (the CPU's microarchitecture lookup), the
    knowledge issue is not repeated."""
    named = tmp_path / "knowledge"
    named.write_text("")
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(named))
    shown = run_cli(["detect", "--root", str(HASWELL), *FAST])
    assert shown.stdout.count(f"HWTUNE_KNOWLEDGE_DIR={named}") == 1, shown.stdout
