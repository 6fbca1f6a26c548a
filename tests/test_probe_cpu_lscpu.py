"""lscpu in the forms people paste: `-e` tables, transcripts, several core types, wrapped or
missing Flags lines (captures in tests/data/cpu, sources in its SOURCES.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.models.cpulist import MAX_CPU
from hwtune.models.hardware import CpuInfo, NumaNode
from hwtune.probes import detect
from hwtune.probes.cpu import probe_cpu
from hwtune.probes.issues import IssueLog
from hwtune.probes.lscpu import parse_lscpu
from hwtune.probes.numa import probe_numa
from hwtune.probes.root import MAX_LARGE
from tests.conftest import DATA, REPO

CAPTURES = DATA / "cpu"
FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc "
    "cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes "
    "xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch fsgsbase bmi1 avx2 smep bmi2 erms "
    "invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw "
    "avx512vl xsaveopt xsavec xgetbv1 xsaves avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq "
    "avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm md_clear arch_capabilities"
)


def probe_text(tmp_path: Path, text: str) -> tuple[CpuInfo, tuple[NumaNode, ...], list[str]]:
    (tmp_path / "lscpu.txt").write_text(text)
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    numa = probe_numa(tmp_path, issues, cpu)
    return cpu, numa, [f"{i.probe}: {i.path}:{i.line}: {i.reason}" for i in issues]


def capture(tmp_path: Path, name: str) -> tuple[CpuInfo, tuple[NumaNode, ...], list[str]]:
    shutil.copy(CAPTURES / name, tmp_path / "lscpu.txt")
    return probe_text(tmp_path, (CAPTURES / name).read_text())


def test_quad_gh200_from_an_lscpu_e_transcript(tmp_path: Path) -> None:
    cpu, numa, issues = capture(tmp_path, "gh200-quad-lscpu-e.txt")
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (288, 288, 4)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (1, False)
    assert [(n.id, n.cpus[0], n.cpus[-1], len(n.cpus)) for n in numa] == [
        (0, 0, 71, 72),
        (1, 72, 143, 72),
        (2, 144, 215, 72),
        (3, 216, 287, 72),
    ]
    assert {c.cpu: c.socket for c in cpu.topology}[200] == 2
    assert cpu.topology_basis and cpu.topology_basis.startswith("lscpu rows")
    # The prompt lines and nproc's "288" are not lscpu's: no parse problems from them.
    assert not [i for i in issues if "expected 'Key: value'" in i or "row" in i]


def test_lscpu_e_with_offline_cpus_and_dashes() -> None:
    text = (
        "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE    MAXMHZ   MINMHZ\n"
        "  0    0      0    0 0:0:0:0          yes 3000.0000 800.0000\n"
        "  1    0      0    0 0:0:0:0          yes 3000.0000 800.0000\n"
        "  2    -      -    - :::               no         -        -\n"
    )
    facts = parse_lscpu(text)
    assert [(r.cpu, r.core, r.socket, r.node, r.online) for r in facts.rows] == [
        (0, 0, 0, 0, True),
        (1, 0, 0, 0, True),
        (2, None, None, None, False),
    ]
    assert facts.max_mhz == {0: 3000.0, 1: 3000.0} and facts.problems == ()


def test_dynamiq_phone_model_name_blocks_sum_their_cores(tmp_path: Path) -> None:
    cpu, numa, issues = capture(tmp_path, "utillinux-arm-A510-A710-A715-X3.lscpu")
    facts = parse_lscpu((CAPTURES / "utillinux-arm-A510-A710-A715-X3.lscpu").read_text())
    assert [t["Model name"] for t in facts.types] == [
        "Cortex-A510",
        "Cortex-A710",
        "Cortex-A715",
        "Cortex-X3",
    ]
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (8, 8, 1)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (1, False)
    assert "4 core types" in (cpu.topology_basis or "")
    # Each CPU is its own core (the -p -y section's Socket,Core pairs), all on socket 0.
    assert len({c.core for c in cpu.topology}) == 8 and {c.socket for c in cpu.topology} == {0}
    assert [n.cpus for n in numa] == [tuple(range(8))]
    assert not [i for i in issues if "sockets" in i and "numa" in i]


def test_sparc64_summary_and_rows(tmp_path: Path) -> None:
    cpu, _, _ = capture(tmp_path, "utillinux-sparc64.lscpu")
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (6, 6, 6)
    assert cpu.online_cpus == (6, 7, 10, 11, 14, 15) and cpu.threads_per_core == 1


def test_flags_wrapped_by_the_terminal_at_column_zero(tmp_path: Path) -> None:
    # util-linux >= 2.38 tree layout, then a terminal that wrapped each line at 80 columns:
    # the continuations start at column 0, mid-token.
    flags_line = "    Flags:                 " + FLAGS
    wrapped = [flags_line[i : i + 80] for i in range(0, len(flags_line), 80)]
    text = "\n".join(
        [
            "Architecture:              x86_64",
            "  CPU op-mode(s):          32-bit, 64-bit",
            "CPU(s):                    8",
            "  On-line CPU(s) list:     0-7",
            "Vendor ID:                 GenuineIntel",
            "  Model name:              Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
            "    CPU family:            6",
            "    Model:                 106",
            "    Thread(s) per core:    2",
            "    Core(s) per socket:    4",
            "    Socket(s):             1",
            *wrapped,
            "Virtualization features:",
            "  Hypervisor vendor:       KVM",
        ]
    )
    assert any(not line[0].isspace() and ":" not in line for line in wrapped[1:])
    facts = parse_lscpu(text)
    assert facts.flags == tuple(sorted(FLAGS.split()))
    assert facts.problems == ()
    cpu, _, _ = probe_text(tmp_path, text)
    assert (cpu.physical_cores, cpu.threads_per_core, cpu.hypervisor) == (4, 2, "KVM")


def test_transcript_with_prompts_keeps_only_lscpu_output() -> None:
    text = (
        "[root@build ~]# uname -m\nx86_64\n"
        "[root@build ~]# lscpu\n"
        "CPU(s):              4\nOn-line CPU(s) list: 0-3\nThread(s) per core:  1\n"
        "Core(s) per socket:  4\nSocket(s):           1\nFlags:               fpu sse2\n"
        "[root@build ~]# free -g\n"
        "        total   used   free\nMem:       15      1     14\n"
        "[root@build ~]# lscpu -p\n"
        "# CPU,Core,Socket,Node\n0,0,0,0\n1,1,0,0\n2,2,0,0\n3,3,0,0\n"
        "[root@build ~]# \n"
    )
    facts = parse_lscpu(text)
    assert facts.problems == ()
    assert "Mem" not in facts.fields and facts.number("CPU(s)") == 4
    assert len(facts.rows) == 4 and facts.flags == ("fpu", "sse2")
    # Line numbers still point into the pasted file.
    bad = parse_lscpu(text.replace("2,2,0,0", "x,2,0,0"))
    number = text.split("\n").index("2,2,0,0") + 1
    assert [(p.line, p.reason[:24]) for p in bad.problems] == [
        (number, "not an 'lscpu -p' row: '")
    ]


def test_no_flags_line_says_flags_are_unknown(tmp_path: Path) -> None:
    text = (
        "Architecture:        x86_64\nCPU(s):              16\nOn-line CPU(s) list: 0-15\n"
        "Vendor ID:           AuthenticAMD\nCPU family:          25\nModel:               33\n"
        "Thread(s) per core:  2\nCore(s) per socket:  8\nSocket(s):           1\n"
    )
    cpu, _, issues = probe_text(tmp_path, text)
    assert cpu.flags == () and (cpu.physical_cores, cpu.threads_per_core) == (8, 2)
    assert any("no Flags line" in i and "flags are unknown" in i for i in issues)
    assert "flags unknown" in (cpu.microarch_basis or "")


def test_lscpu_e_alone_on_a_phone_does_not_fold_core_types(tmp_path: Path) -> None:
    # `lscpu -e` on the A510/A710/A715/X3 phone: logical Core ids restart for each core type
    # (as in its `-p` section), but each CPU has its own L1d, so no two are threads of a core.
    rows = [(0, 0, 2016), (1, 1, 2016), (2, 2, 2016), (3, 0, 2803), (4, 1, 2803)]
    rows += [(5, 0, 2803), (6, 1, 2803), (7, 0, 3187)]
    text = "CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE    MAXMHZ   MINMHZ\n" + "".join(
        f"{cpu:3d}    -      0 {core:4d} {cpu}:{cpu}:{cpu}:0          yes {mhz}.2000 307.2000\n"
        for cpu, core, mhz in rows
    )
    cpu, _, issues = probe_text(tmp_path, text)
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets) == (8, 8, 1)
    assert (cpu.threads_per_core, cpu.smt_enabled) == (1, False)
    kinds = {c.cpu: c.kind for c in cpu.topology}
    assert (kinds[0], kinds[7]) == ("efficiency", "performance")
    assert not [i for i in issues if "row" in i]


def test_old_and_s390_socket_lines(tmp_path: Path) -> None:
    # util-linux's ia64-pg0 expected output (old lscpu) and s390-lpar's book layout.
    old = "CPU(s):                16\nThread(s) per core:    1\nCore(s) per socket:    2\n"
    cpu, _, _ = probe_text(tmp_path, old + "CPU socket(s):         8\n")
    assert (cpu.sockets, cpu.physical_cores, cpu.threads_per_core) == (8, 16, 1)
    s390 = (
        "CPU(s):                48\nOn-line CPU(s) list:   0-47\nThread(s) per core:    2\n"
        "Core(s) per socket:    4\nSocket(s) per book:    3\nBook(s):               2\n"
    )
    cpu, _, _ = probe_text(tmp_path, s390)
    assert (cpu.sockets, cpu.physical_cores, cpu.threads_per_core) == (6, 24, 2)
    # lscpu-s390-lpar: 24 virtual sockets of 4 cores for 20 CPUs is no count of this machine.
    lpar = (
        "CPU(s):                20\nOn-line CPU(s) list:   1-5,8-19\nThread(s) per core:    1\n"
        "Core(s) per socket:    4\nSocket(s) per book:    6\nBook(s):               4\n"
    )
    cpu, _, issues = probe_text(tmp_path, lpar)
    assert (cpu.sockets, cpu.physical_cores, cpu.logical_cpus) == (None, None, 20)
    assert any("exceed the 20 CPUs" in i for i in issues)


def test_older_lscpu_on_a_phone_kernel_joins_cluster_sockets(tmp_path: Path) -> None:
    # util-linux < 2.37 had no per-type blocks: on a kernel that numbers clusters as packages
    # its -p rows carry Socket 0,0,0,1,1,1,1,2 (the A510/A710/A715/X3 dump's `-p -y` ids),
    # while the L3 column shows one L3 for all eight CPUs.
    rows = "".join(
        f"{cpu},{cpu},{socket},,,{cpu},{cpu},{cpu},0\n"
        for cpu, socket in enumerate([0, 0, 0, 1, 1, 1, 1, 2])
    )
    text = (
        "Architecture:        aarch64\nCPU(s):              8\nOn-line CPU(s) list: 0-7\n"
        "Thread(s) per core:  1\nCore(s) per socket:  3\nSocket(s):           3\n"
        "Vendor ID:           ARM\nModel name:          Cortex-A510\n\n"
        "# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n" + rows
    )
    cpu, numa, _ = probe_text(tmp_path, text)
    assert (cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (8, 1, 1)
    assert "clusters of one SoC" in (cpu.topology_basis or "")
    assert [n.cpus for n in numa] == [tuple(range(8))]
    # The same rows on x86 are three sockets: only arm64 and riscv64 kernels number clusters.
    cpu, _, _ = probe_text(tmp_path, text.replace("aarch64", "x86_64").replace("ARM", "Intel"))
    assert cpu.sockets == 3


def test_power7_lpar_keeps_its_memory_only_node(tmp_path: Path) -> None:
    cpu, numa, issues = capture(tmp_path, "utillinux-ppc64-POWER7-64cpu.lscpu")
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (
        64,
        16,
        16,
        4,
    )
    # "NUMA node1 CPU(s):" is empty: a node with memory and no CPUs, as lscpu counts 2 nodes.
    assert [(n.id, len(n.cpus), n.cpus_known) for n in numa] == [(0, 64, True), (1, 0, True)]
    assert not [i for i in issues if i.startswith("numa")]


def test_numa_count_without_lists_gives_nodes_of_unknown_cpus(tmp_path: Path) -> None:
    text = (
        "CPU(s):              16\nOn-line CPU(s) list: 0-15\nThread(s) per core:  2\n"
        "Core(s) per socket:  8\nSocket(s):           1\nNUMA node(s):        2\n"
    )
    _, numa, issues = probe_text(tmp_path, text)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == [(0, (), False), (1, (), False)]
    assert any("says 2 NUMA nodes but lists none of their CPUs" in i for i in issues)


@pytest.mark.parametrize(
    ("lists", "nodes", "said"),
    [
        # node1's CPUs are all past the 4 the summary counts: not a memory-only node.
        (
            "NUMA node0 CPU(s):   0-3\nNUMA node1 CPU(s):   4-7\n",
            [(0, (0, 1, 2, 3), True), (1, (), False)],
            "NUMA node1 lists CPUs 4-7, beyond the 4 CPUs lscpu.txt describes: ignored; "
            "the node's CPUs are unknown",
        ),
        (
            "NUMA node0 CPU(s):   0-5\n",
            [(0, (0, 1, 2, 3), True)],
            "NUMA node0 lists CPUs 4-5, beyond the 4 CPUs lscpu.txt describes: ignored",
        ),
    ],
    ids=["whole-node-beyond", "part-of-a-node-beyond"],
)
def test_numa_lists_beyond_the_cpu_count_are_an_issue(
    tmp_path: Path, lists: str, nodes: list[tuple[int, tuple[int, ...], bool]], said: str
) -> None:
    """lscpu's NUMA lines and its CPU(s) line disagree: this passed silently, node1 taken
    for a memory-only node."""
    text = (
        "Architecture:        x86_64\nCPU(s):              4\nOn-line CPU(s) list: 0-3\n"
        "Thread(s) per core:  1\nCore(s) per socket:  4\nSocket(s):           1\n"
        f"NUMA node(s):        {len(nodes)}\n{lists}"
    )
    _, numa, issues = probe_text(tmp_path, text)
    assert [(n.id, n.cpus, n.cpus_known) for n in numa] == nodes
    assert any(said in i for i in issues if i.startswith("numa: lscpu.txt")), issues


def test_summary_after_a_parsable_section_is_read() -> None:
    # `lscpu -p` pasted first, the summary after it (two commands' output in one file).
    text = "# CPU,Core,Socket,Node\n0,0,0,0\n1,1,0,0\n\nCPU(s):              2\nSocket(s):    1\n"
    facts = parse_lscpu(text)
    assert facts.problems == () and facts.number("CPU(s)") == 2 and len(facts.rows) == 2


def test_lscpu_json_with_two_core_types(tmp_path: Path) -> None:
    def block(name: str, cores: int) -> dict[str, object]:
        children = [
            {"field": "Thread(s) per core:", "data": "1"},
            {"field": "Core(s) per socket:", "data": str(cores)},
            {"field": "Socket(s):", "data": "1"},
        ]
        return {"field": "Model name:", "data": name, "children": children}

    data = {
        "lscpu": [
            {"field": "Architecture:", "data": "aarch64"},
            {"field": "CPU(s):", "data": "8"},
            {"field": "On-line CPU(s) list:", "data": "0-7"},
            {
                "field": "Vendor ID:",
                "data": "ARM",
                "children": [block("Cortex-A55", 4), block("Cortex-A76", 4)],
            },
        ]
    }
    cpu, _, _ = probe_text(tmp_path, json.dumps(data))
    assert (cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (8, 1, 1)


def test_core_types_with_different_threads_leave_threads_per_core_null(tmp_path: Path) -> None:
    text = (
        "CPU(s):              12\nOn-line CPU(s) list: 0-11\nVendor ID:           ARM\n"
        + "".join(
            f"Model name:          {name}\nThread(s) per core:  {threads}\n"
            f"Core(s) per socket:  {cores}\nSocket(s):           1\n"
            for name, threads, cores in (("Neoverse-X", 2, 4), ("Neoverse-Y", 1, 4))
        )
    )
    cpu, _, issues = probe_text(tmp_path, text)
    assert (cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (8, 1, None)
    assert any("2 core types whose threads per core (1, 2)" in i for i in issues)


# --- hostile captures: each of these lost the whole CPU probe, or hung it ---------------------

X86_RECORD = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu sse4_2 avx avx2\n"
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"lscpu": ' + "[" * 1000 + "]" * 1000 + "}", "nested more than"),  # RecursionError
        ('{"lscpu": [{"field": "CPU(s):", "data": ' + "9" * 5000 + "}]}", "5000 digits"),
        ('{"lscpu": [{"field": "CPU(s):", "data": NaN}]}', "NaN is not a JSON number"),
    ],
    ids=["deep", "huge-number", "nan"],
)
def test_hostile_lscpu_json_is_an_issue_and_cpuinfo_still_counts(
    tmp_path: Path, text: str, why: str
) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(X86_RECORD)
    (tmp_path / "lscpu.txt").write_text(text)
    hw = detect(tmp_path, gpus=False, tensorflow=False)
    assert hw.cpu.model_name == "Intel(R) Xeon(R) Platinum 8481C"  # cpuinfo's facts are kept
    assert not [i for i in hw.issues if "unexpectedly" in i.reason], hw.issues
    assert any(i.path == "lscpu.txt" and why in i.reason for i in hw.issues), hw.issues


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-inf", "0", "-4800"])
def test_maxmhz_that_is_no_clock_is_refused(value: str) -> None:
    text = "# CPU,Core,Socket,Node,MAXMHZ\n" + "".join(
        f"{cpu},{cpu},0,0,{value if cpu == 3 else '4800.0000'}\n" for cpu in range(4)
    )
    facts = parse_lscpu(text)
    assert facts.max_mhz == {0: 4800.0, 1: 4800.0, 2: 4800.0}
    assert [p.line for p in facts.problems] == [5]
    assert "not a positive clock" in facts.problems[0].reason


def test_a_nan_maxmhz_makes_no_core_types(tmp_path: Path) -> None:
    """A NaN compared below every clock, so CPU 3 became an E-core of a uniform part."""
    text = "CPU(s): 4\n\n# CPU,Core,Socket,Node,MAXMHZ\n" + "".join(
        f"{cpu},{cpu},0,0,{'nan' if cpu == 3 else '4800.0000'}\n" for cpu in range(4)
    )
    cpu, _, issues = probe_text(tmp_path, text)
    assert cpu.core_types == () and {c.kind for c in cpu.topology} == {None}
    assert any("MAXMHZ 'nan'" in i for i in issues)


def rows(count: int) -> str:
    """`lscpu -p` of `count` CPUs, two threads per core."""
    body = "".join(
        f"{cpu},{cpu // 2},0,0,,{cpu // 2},{cpu // 2},{cpu // 2},0\n" for cpu in range(count)
    )
    return "# CPU,Core,Socket,Node,,L1d,L1i,L2,L3\n" + body


def test_rows_past_the_cpu_bound_are_dropped_with_one_problem() -> None:
    facts = parse_lscpu(rows(MAX_CPU + 10) + f"{MAX_CPU + 20},0,0,0\n")
    assert len(facts.rows) == MAX_CPU
    assert [p.reason for p in facts.problems] == [
        f"more than {MAX_CPU} CPU rows: the rest are ignored"
    ]
    beyond = parse_lscpu(f"# CPU,Core,Socket,Node\n0,0,0,0\n{MAX_CPU},1,0,0\n")
    assert [r.cpu for r in beyond.rows] == [0]
    assert [p.line for p in beyond.problems] == [3]


DETECT = [sys.executable, "-m", "hwtune", "detect", "--json", "--no-gpu", "--no-tensorflow"]


def test_many_lscpu_rows_take_linear_time(tmp_path: Path) -> None:
    """100,000 rows: `in` on the online tuple made 40,000 take 6.6 s (so these about 40 s, and
    700,000 over ten minutes); the rows are now capped at MAX_CPU and looked up in sets."""
    (tmp_path / "lscpu.txt").write_text(rows(100_000))
    done = subprocess.run(
        [*DETECT, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
        check=False,
    )
    cpu = json.loads(done.stdout)["cpu"]
    assert (cpu["logical_cpus"], cpu["physical_cores"]) == (MAX_CPU, MAX_CPU // 2)


def test_a_value_wrapped_over_many_lines_takes_linear_time(tmp_path: Path) -> None:
    """Each wrapped line was appended to the value's str, copying it: 240,000 lines (21 MB)
    ran past 20 s in detect, and parsing 120,000 took 199 s in a test process; the parts are
    now joined once (240,000 in about 3 s)."""
    summary = "Architecture:        x86_64\nCPU(s):              2\nFlags:               fpu"
    continued = "\n".join(" " * 21 + f" sse{n % 5} avx{n % 3}" * 6 for n in range(240_000))
    (tmp_path / "lscpu.txt").write_text(f"{summary}\n{continued}\nStepping:            2\n")
    done = subprocess.run(
        [*DETECT, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=REPO,
        check=False,
    )
    model = json.loads(done.stdout)
    assert (model["cpu"]["logical_cpus"], model["cpu"]["stepping"]) == (2, 2)
    # joined, the value is longer than any lscpu prints (cpuinfo.MAX_VALUE_CHARS): not kept
    said = [(i["path"], i["line"], i["reason"]) for i in model["issues"]]
    assert any(p == "lscpu.txt" and n == 3 and "'Flags': a value of" in r for p, n, r in said)


def test_summary_keys_past_the_bound_are_dropped_with_one_problem() -> None:
    """Before: every key was kept; 2.7 million different keys in a 31 MB lscpu.txt (under the
    32 MiB cap) took detect 14 s and 1.1 GB. lscpu prints a few hundred at most."""
    from hwtune.probes.lscpu import MAX_KEYS

    keys = "".join(f"k{n}: v\n" for n in range(MAX_KEYS + 50))
    facts = parse_lscpu(f"Architecture: x86_64\n{keys}Model name: late\nArchitecture: aarch64\n")
    assert len(facts.fields) == MAX_KEYS and "Model name" not in facts.fields
    assert facts.fields["Architecture"] == "aarch64"  # a key already kept still updates
    assert [(p.line, p.reason) for p in facts.problems] == [
        (MAX_KEYS + 1, f"more than {MAX_KEYS} different keys: the rest are ignored")
    ]


def test_an_lscpu_refused_for_its_size_is_not_called_absent(tmp_path: Path) -> None:
    with (tmp_path / "lscpu.txt").open("wb") as f:
        f.truncate(MAX_LARGE + 1)  # sparse: nothing is written
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    reasons = [f"{i.path}: {i.reason}" for i in issues]
    assert cpu.logical_cpus is None
    assert reasons == [
        "lscpu.txt: cannot read: larger than 32 MiB: refused",
        "None: no CPU source: proc/cpuinfo absent, sys/devices/system/cpu absent, "
        "lscpu.txt unreadable",
    ]
