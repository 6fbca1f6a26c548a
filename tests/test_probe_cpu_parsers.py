"""The pure parsers: /proc/cpuinfo and lscpu text, including malformed and hostile input."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hwtune.probes.cpu import probe_cpu
from hwtune.probes.cpuinfo import parse_cpuinfo
from hwtune.probes.issues import IssueLog
from hwtune.probes.lscpu import parse_lscpu
from tests.conftest import DATA

HOSTS = DATA / "hosts"

TREE_LAYOUT = """\
Architecture:             aarch64
  CPU op-mode(s):         32-bit, 64-bit
  Byte Order:             Little Endian
CPU(s):                   64
  On-line CPU(s) list:    0-63
Vendor ID:                ARM
  Model name:             Neoverse-N1
    Model:                1
    Thread(s) per core:   1
    Core(s) per cluster:  64
    Socket(s):            -
    Cluster(s):           1
    Flags:                fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid as
                          imdrdm lrcpc dcpop asimddp ssbs
Caches (sum of all):
  L1d:                    4 MiB (64 instances)
NUMA:
  NUMA node(s):           1
  NUMA node0 CPU(s):      0-63
"""


def test_cpuinfo_x86_fields() -> None:
    facts = parse_cpuinfo((HOSTS / "spack-rhel7-haswell/proc/cpuinfo").read_text())
    assert (facts.arch, facts.vendor, facts.family, facts.model, facts.stepping) == (
        "x86_64",
        "GenuineIntel",
        6,
        63,
        2,
    )
    assert len(facts.processors) == 24 and facts.processors[23].physical_id == 1
    assert list(facts.flags) == sorted(facts.flags) and "avx2" in facts.flags
    assert facts.problems == ()


def test_cpuinfo_power_trailer_and_pvr() -> None:
    facts = parse_cpuinfo(
        (HOSTS / "cpufeatures-ppc64le-power9-w8-fragment/proc/cpuinfo").read_text()
    )
    assert (facts.arch, facts.vendor, facts.pvr, facts.platform) == (
        "ppc64le",
        "IBM",
        0x004E,
        "PowerNV",
    )
    assert facts.model_name == "POWER9, altivec supported"
    assert [p.processor for p in facts.processors] == [143]


def test_cpuinfo_flags_are_the_ones_every_processor_has() -> None:
    text = (
        "processor : 0\nvendor_id : GenuineIntel\nflags : sse avx2 fma\n\n"
        "processor : 1\nvendor_id : GenuineIntel\nflags : sse fma\n"
    )
    assert parse_cpuinfo(text).flags == ("fma", "sse")


def test_cpuinfo_malformed_lines_name_their_line() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: six\nmodel\t\t: 85\n"
        "flags\t\t: fpu sse\ncpu fam\n\x00\x01\x02\ncore id\t\t: x1\n"
    )
    facts = parse_cpuinfo(text)
    problems = {p.line: p.reason for p in facts.problems}
    assert problems[3] == "'cpu family' is not a number: 'six'"
    assert problems[6] == "expected 'key : value', got 'cpu fam'"
    assert problems[7] == "binary data, not text"
    assert problems[8] == "'core id' is not a number: 'x1'"
    assert facts.model == 85 and facts.family is None


def test_binary_garbage_file_ends_as_issues(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "lscpu.txt").write_bytes(b"\xff\xfe\x00garbage\nCPU(s):\x00 4\n")
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    assert cpu.arch == "unknown" and cpu.logical_cpus is None
    where = {(i.path, i.line) for i in issues}
    assert ("proc/cpuinfo", 1) in where and ("lscpu.txt", 1) in where and ("lscpu.txt", 2) in where
    assert any(i.reason == "no 'processor' records" for i in issues)


def test_records_of_different_parts_are_an_issue_naming_the_line(tmp_path: Path) -> None:
    """A file spliced from two machines: before, Zen 5 was reported (its first record) with no
    word of the Haswell record after it, and the tuning model followed the first."""
    zen5 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 68\n"
    haswell = "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 63\n"
    flags = "flags\t\t: fpu sse2 avx2\n\n"
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(zen5 + flags + haswell + flags)
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    assert cpu.vendor == "AuthenticAMD" and cpu.family == 26
    said = {i.line: i.reason for i in issues if i.path == "proc/cpuinfo"}
    assert said[8] == (
        "'vendor_id' is 'GenuineIntel' on this processor but 'AuthenticAMD' on the first; "
        "the first processor's identity is used"
    )
    assert "'cpu family' is '6' on this processor but '26'" in said[9]
    assert "'model' is '63' on this processor but '68'" in said[10]
    # One machine's records, all alike, raise nothing.
    (tmp_path / "proc/cpuinfo").write_text(zen5 + flags + zen5.replace(": 0", ": 1") + flags)
    alike = IssueLog()
    probe_cpu(tmp_path, alike)
    assert not [i for i in alike if "on the first" in i.reason]


def test_unreadable_file_is_an_issue(tmp_path: Path) -> None:
    (tmp_path / "proc/cpuinfo").mkdir(parents=True)  # a directory where a file should be
    issues = IssueLog()
    probe_cpu(tmp_path, issues)
    assert any(i.path == "proc/cpuinfo" and i.reason.startswith("cannot read") for i in issues)


def test_lscpu_tree_layout_with_wrapped_flags() -> None:
    # A terminal (or libsmartcols) wraps at a fixed width, mid-token: "as" + "imdrdm".
    facts = parse_lscpu(TREE_LAYOUT)
    assert facts.fields["Model name"] == "Neoverse-N1"
    assert facts.number("Socket(s)") is None and facts.number("Cluster(s)") == 1
    assert facts.flags[-1] == "ssbs" and "asimdrdm" in facts.flags and "cpuid" in facts.flags
    assert facts.numa == {0: tuple(range(64))}
    assert facts.caches[0].size_bytes == 64 * 1024 and facts.caches[0].instances == 64
    assert facts.problems == ()


def test_lscpu_tree_layout_probes_as_arm(tmp_path: Path) -> None:
    (tmp_path / "lscpu.txt").write_text(TREE_LAYOUT)
    issues = IssueLog()
    cpu = probe_cpu(tmp_path, issues)
    assert (cpu.arch, cpu.vendor, cpu.microarch) == ("aarch64", "ARM", "neoverse-n1")
    assert (cpu.logical_cpus, cpu.physical_cores, cpu.sockets, cpu.threads_per_core) == (
        64,
        64,
        None,
        1,
    )


def test_lscpu_parsable_sections_and_short_rows() -> None:
    facts = parse_lscpu((HOSTS / "utillinux-x86_64-meteor_lake/lscpu.txt").read_text())
    assert len(facts.rows) == 22 and facts.rows[16].core == 10 and facts.rows[16].socket == 0
    assert facts.problems == ()


def test_lscpu_bad_rows_and_lists_name_their_line() -> None:
    text = (
        "CPU(s): 4\nOn-line CPU(s) list: 0-3\nNUMA node0 CPU(s): 0-z\n"
        "# CPU,Core,Socket,Node,MAXMHZ\n0,0,0,0,4000.0\nx,1,0,0,\n2,2,0,0,fast\n"
    )
    facts = parse_lscpu(text)
    problems = {p.line: p.reason for p in facts.problems}
    assert "'z' is not a CPU number" in problems[3]
    assert problems[6] == "not an 'lscpu -p' row: 'x,1,0,0,'"
    assert problems[7] == "MAXMHZ is not a number: 'fast'"
    assert facts.max_mhz == {0: 4000.0}


def test_cpuinfo_records_past_the_cpu_bound_are_dropped_with_one_problem() -> None:
    """Before: every record was kept; 2.5 million "processor:N" records in a 31 MB cpuinfo (under
    the 32 MiB cap) took detect 19 s and 1.5 GB. Now the first MAX_CPU, as lscpu's rows."""
    from hwtune.models.cpulist import MAX_CPU

    text = "".join(f"processor\t: {n}\nvendor_id\t: GenuineIntel\n\n" for n in range(MAX_CPU + 9))
    facts = parse_cpuinfo(text)
    assert len(facts.processors) == MAX_CPU
    assert [(p.line, p.reason) for p in facts.problems] == [
        (3 * MAX_CPU + 1, f"more than {MAX_CPU} processor records: the rest are ignored")
    ]


def test_lscpu_json() -> None:
    data = {
        "lscpu": [
            {"field": "Architecture:", "data": "x86_64"},
            {
                "field": "CPU(s):",
                "data": "8",
                "children": [{"field": "On-line CPU(s) list:", "data": "0-7"}],
            },
            {
                "field": "Vendor ID:",
                "data": "AuthenticAMD",
                "children": [{"field": "Flags:", "data": "fpu sse2 avx2"}],
            },
        ]
    }
    facts = parse_lscpu(json.dumps(data))
    assert facts.number("CPU(s)") == 8 and facts.fields["On-line CPU(s) list"] == "0-7"
    assert facts.flags == ("avx2", "fpu", "sse2")
    assert parse_lscpu("{broken").problems[0].reason.startswith("invalid JSON")


@settings(max_examples=150, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(list("processor:flags 0123456789#,\n\t-xCPU()\x00é")),
        max_size=400,
    )
)
def test_parsers_never_raise(text: str) -> None:
    cpuinfo = parse_cpuinfo(text)
    lscpu = parse_lscpu(text)
    assert all(p.line >= 1 for p in (*cpuinfo.problems, *lscpu.problems))


def test_cpuinfo_keys_past_the_bound_of_a_record_are_dropped_with_one_problem() -> None:
    """Before: every key of a record was kept; one record of 2.7 million different "kN: v"
    lines (a 31 MB file, under the 32 MiB cap) took 4.6 s and 612 MB. The kernel prints
    about 30 keys per CPU."""
    from hwtune.probes.cpuinfo import MAX_RECORD_KEYS

    keys = "".join(f"k{n}\t: v\n" for n in range(MAX_RECORD_KEYS + 50))
    text = f"processor\t: 0\n{keys}vendor_id\t: GenuineIntel\n\nprocessor\t: 1\nflags\t: lm\n"
    facts = parse_cpuinfo(text)
    assert len(facts.processors) == 2  # the next record is read as usual
    assert facts.vendor != "GenuineIntel"  # the key past the bound was dropped
    assert [(p.line, p.reason) for p in facts.problems] == [
        (
            MAX_RECORD_KEYS + 1,
            f"more than {MAX_RECORD_KEYS} different keys in a record: the rest are ignored",
        )
    ]


def test_misnumbered_processors_are_an_issue_naming_the_line(tmp_path: Path) -> None:
    """A processor numbered twice was only "counts unknown", and one numbered 99999999 made
    "only 2 of >=100000000 processors present": neither said which line was wrong."""
    (tmp_path / "proc").mkdir()
    block = "processor\t: {}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 63\n\n"

    def reasons(*numbers: int) -> dict[int | None, str]:
        (tmp_path / "proc/cpuinfo").write_text("".join(block.format(n) for n in numbers))
        issues = IssueLog()
        probe_cpu(tmp_path, issues)
        return {i.line: i.reason for i in issues if i.path == "proc/cpuinfo"}

    assert reasons(0, 1, 1)[11] == "processor 1 again (first on line 6): topology unknown"
    impossible = reasons(0, 99999999)
    beyond = "processor 99999999 is beyond any CPU number (< 65536): topology unknown"
    assert impossible[6] == beyond
    assert not [r for r in impossible.values() if ">=100000000" in r]
    # A fragment of a larger machine is still said as before.
    assert any("only 2 of >=4 processors present" in r for r in reasons(0, 3).values())
