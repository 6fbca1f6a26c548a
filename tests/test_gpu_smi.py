"""nvidia-smi captures: XML and topo parsing, hostile input, the name table, snapshots.

Real captures live in tests/data/gpu (see SOURCES.md there); the small documents written in
this file are constructed, in the formats those captures and nvidia-smi's DTD show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwtune.knowledge import clear_cache, load_table
from hwtune.probes import nvidia_smi
from hwtune.probes.gpu import (
    GpuEntry,
    gpu_table,
    match_gpu_name,
    probe_gpus,
    save_gpu_snapshot,
)
from hwtune.probes.issues import IssueLog
from hwtune.probes.nvidia_smi import parse_smi_xml
from hwtune.probes.nvidia_smi_list import LIST_NAME
from hwtune.probes.nvidia_topo import parse_topo

from .conftest import DATA

GPU_DATA = DATA / "gpu"
T4_XML = GPU_DATA / "telegraf-tesla-t4-xml.smi"
P4D_TOPO = GPU_DATA / "trainingoneks-aws-p4d.24xlarge-8xA100.topo"
MIG_LIST = GPU_DATA / "cuiliang-8xa100-80gb-mig-1g20gb.L"
GB200_TOPO = GPU_DATA / "aiconfigurator-gb200-4gpu.topo"
GT1030_XML = GPU_DATA / "telegraf-geforce-gt-1030-v11.smi"


def layout(
    tmp_path: Path, xml: Path | bytes | None = None, topo: Path | str | None = None
) -> Path:
    """A snapshot root as `hwtune snapshot` lays it out."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    if isinstance(xml, Path):
        shutil.copy(xml, root / nvidia_smi.XML_NAME)
    elif xml is not None:
        (root / nvidia_smi.XML_NAME).write_bytes(xml)
    if isinstance(topo, Path):
        shutil.copy(topo, root / nvidia_smi.TOPO_NAME)
    elif topo is not None:
        (root / nvidia_smi.TOPO_NAME).write_text(topo)
    return root


def reasons(issues: IssueLog) -> str:
    return "\n".join(f"{i.path}:{i.line}: {i.reason}" for i in issues)


# ------------------------------------------------------------------ the real captures


def test_t4_capture_gives_expected_facts(tmp_path: Path) -> None:
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=T4_XML), issues, live=False)
    assert report.source == "nvidia-smi"
    assert report.driver_version == "515.105.01"
    assert report.cuda_driver_version == "11.7"
    (gpu,) = report.gpus
    assert gpu.name == "Tesla T4"
    assert gpu.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert gpu.pci_bus_id == "00000000:00:1E.0"
    assert gpu.memory_bytes == 15360 * 2**20
    assert gpu.compute_capability == "7.5"
    assert gpu.compute_capability_basis == "name table: T4"
    assert gpu.architecture == "Turing"
    assert gpu.mig_enabled is False  # current_mig "N/A": a T4 cannot be partitioned
    assert gpu.mig_devices == ()
    assert list(issues) == []


def test_gt_1030_v11_capture_gives_expected_facts(tmp_path: Path) -> None:
    # Every value below is in the capture: <driver_version>, <cuda_version>, <product_name>,
    # <uuid>, <pci_bus_id>, <fb_memory_usage><total>, <current_mig>N/A. Schema v11 prints no
    # <product_architecture>: capability and architecture come from the name table (GT 1030:
    # Pascal, 6.1 on developer.nvidia.com/cuda-gpus).
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=GT1030_XML), issues, live=False)
    assert (report.driver_version, report.cuda_driver_version) == ("470.74", "11.4")
    (gpu,) = report.gpus
    assert (gpu.name, gpu.uuid, gpu.pci_bus_id) == (
        "NVIDIA GeForce GT 1030",
        "GPU-857c6374-f681-cf3a-f99f-9063a87b8ac0",
        "00000000:2D:00.0",
    )
    assert gpu.memory_bytes == 1998 * 2**20
    assert (gpu.compute_capability, gpu.architecture) == ("6.1", "Pascal")
    assert gpu.compute_capability_basis == "name table: GT 1030"
    assert (gpu.mig_enabled, gpu.mig_devices) == (False, ())
    assert list(issues) == []


# NVML's placeholders as nvidia-smi prints them where a query fails or does not apply
# (nvidia_smi.NOT_REPORTED): bare in `-q -x`, bracketed in `--query-gpu` CSV.
PLACEHOLDERS = (
    "N/A",
    "[N/A]",
    "Not Supported",
    "[Not Supported]",
    "Unknown Error",
    "[Unknown Error]",
    "Insufficient Permissions",
    "[Insufficient Permissions]",
    "GPU is lost",
    "[GPU is lost]",
    "Unknown",
    "Requested functionality has been deprecated",
)


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_a_placeholder_architecture_is_filled_from_the_name_table(
    tmp_path: Path, placeholder: str
) -> None:
    """The real T4 capture with one field changed: <product_architecture> as nvidia-smi
    prints it when NVML cannot tell. It was kept as the architecture ("Not Supported"), and
    the gpus table (T4: Turing) only fills an architecture that is missing."""
    data = T4_XML.read_bytes()
    real = b"<product_architecture>Turing</product_architecture>"
    assert data.count(real) == 1
    xml = data.replace(
        real, f"<product_architecture>{placeholder}</product_architecture>".encode()
    )
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=xml), issues, live=False)
    (gpu,) = report.gpus
    assert (gpu.architecture, gpu.compute_capability) == ("Turing", "7.5")
    assert list(issues) == []


def test_p4d_topo_capture_gives_eight_gpus_all_nv12(tmp_path: Path) -> None:
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, topo=P4D_TOPO), issues, live=False)
    assert [g.index for g in report.gpus] == list(range(8))
    pairs = {tuple(sorted((g.index, p))) for g in report.gpus for p in g.nvlink_peers}
    assert len(pairs) == 28
    for gpu in report.gpus:
        assert {(link.kind, link.nvlinks) for link in gpu.links} == {("NV12", 12)}
        assert gpu.name == f"GPU {gpu.index}"
        # The multi-word trailing columns ("GPU NUMA ID" is three words) stay aligned.
        if gpu.index < 4:
            assert gpu.numa_node == 0
            assert gpu.cpu_affinity == (*range(0, 24), *range(48, 72))
        else:
            assert gpu.numa_node == 1
            assert gpu.cpu_affinity == (*range(24, 48), *range(72, 96))
    assert "nvidia-smi-q.xml absent" in reasons(issues)


def test_gb200_topo_with_empty_cpu_affinity_keeps_the_numa_node(tmp_path: Path) -> None:
    # The capture's GPU2 and GPU3 rows have an empty CPU Affinity cell ("NODE\t\t1\t\tN/A"):
    # their NUMA Affinity (1) is still read, not dropped with a "cells for columns" issue.
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, topo=GB200_TOPO), issues, live=False)
    assert [(g.index, g.numa_node, g.cpu_affinity) for g in report.gpus] == [
        (0, 0, tuple(range(36))),  # "0-35\t0"
        (1, 0, tuple(range(36))),
        (2, 1, ()),  # "\t1": no CPU Affinity printed
        (3, 1, ()),
    ]
    for gpu in report.gpus:  # every GPU pair NV18; the six NIC columns are not GPU links
        assert {(link.kind, link.nvlinks) for link in gpu.links} == {("NV18", 18)}
        assert gpu.nvlink_peers == tuple(i for i in range(4) if i != gpu.index)
    assert [i.reason for i in issues if i.path == nvidia_smi.TOPO_NAME] == []


def test_xml_and_topo_merge_by_index(tmp_path: Path) -> None:
    xml = _xml(
        _gpu_xml("NVIDIA A100-SXM4-40GB", "00000000:07:00.0"),
        _gpu_xml("NVIDIA A100-SXM4-40GB", "00000000:0F:00.0"),
    )
    topo = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV12\t0-23\t0\t\tN/A\nGPU1\tNV12\t X \t24-47\t1\t\tN/A\n"
    )
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=xml, topo=topo), issues, live=False)
    assert [(g.name, g.compute_capability, g.nvlink_peers, g.numa_node) for g in report.gpus] == [
        ("NVIDIA A100-SXM4-40GB", "8.0", (1,), 0),
        ("NVIDIA A100-SXM4-40GB", "8.0", (0,), 1),
    ]
    assert list(issues) == []


def test_count_mismatch_between_xml_and_topo_is_an_issue(tmp_path: Path) -> None:
    xml = _xml(_gpu_xml("Tesla V100-SXM2-16GB", "00000000:00:1B.0"))
    topo = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\t0-7\nGPU1\tNV1\t X \t0-7\n"
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=xml, topo=topo), issues, live=False)
    assert [g.index for g in report.gpus] == [0]
    assert report.gpus[0].compute_capability == "7.0"
    assert "lists 1 GPU but nvidia-smi-topo.txt 2" in reasons(issues)


def test_no_capture_files_means_no_gpus_and_no_issue(tmp_path: Path) -> None:
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path), issues, live=False)
    assert (report.gpus, report.source) == ((), "none")
    assert list(issues) == []


def test_detect_reports_gpus_from_captures(tmp_path: Path) -> None:
    try:
        from hwtune.probes import detect

        hw = detect(layout(tmp_path, xml=T4_XML, topo=P4D_TOPO), tensorflow=False)
    except ImportError as err:  # another probe module not written yet
        pytest.skip(f"detect() incomplete: {err}")
    assert (hw.gpu_source, hw.gpu_driver, hw.cuda_driver_version) == (
        "nvidia-smi",
        "515.105.01",
        "11.7",
    )
    # One GPU in the XML, eight in the matrix: the XML's GPU 0 with the matrix's links.
    assert [(g.name, g.compute_capability, len(g.nvlink_peers)) for g in hw.gpus] == [
        ("Tesla T4", "7.5", 7)
    ]
    assert any("lists 1 GPU but nvidia-smi-topo.txt 8" in i.reason for i in hw.issues)


# ------------------------------------------------------------------ XML details


def _gpu_xml(name: str, bus: str, mig: str = "N/A", extra: str = "") -> str:
    return (
        f'<gpu id="{bus}"><product_name>{name}</product_name>'
        f"<mig_mode><current_mig>{mig}</current_mig></mig_mode>"
        f"<uuid>GPU-{bus}</uuid><pci><pci_bus_id>{bus}</pci_bus_id></pci>"
        f"<fb_memory_usage><total>40960 MiB</total></fb_memory_usage>{extra}</gpu>"
    )


def _xml(
    *gpus: str,
    doctype: str = '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
    attached: int | None = None,
) -> bytes:
    count = len(gpus) if attached is None else attached
    return (
        f'<?xml version="1.0" ?>\n{doctype}\n<nvidia_smi_log>\n'
        f"<driver_version>550.54.15</driver_version><cuda_version>12.4</cuda_version>"
        f"<attached_gpus>{count}</attached_gpus>\n" + "\n".join(gpus) + "\n</nvidia_smi_log>\n"
    ).encode()


def test_mig_devices_are_read() -> None:
    # Layout of <mig_devices> as R535+ drivers print it (gpu_instance_id, fb_memory_usage).
    migs = (
        "<mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id>"
        "<fb_memory_usage><total>9728 MiB</total></fb_memory_usage></mig_device>"
        "<mig_device><index>1</index><fb_memory_usage><total>N/A</total></fb_memory_usage>"
        "</mig_device></mig_devices>"
    )
    issues = IssueLog()
    log = parse_smi_xml(
        _xml(_gpu_xml("NVIDIA A100 80GB PCIe", "00000000:17:00.0", "Enabled", migs)),
        "x.xml",
        issues,
    )
    (gpu,) = log.gpus
    assert gpu.mig_enabled is True
    assert [(m.index, m.memory_bytes) for m in gpu.mig_devices] == [(0, 9728 << 20), (1, None)]
    assert (log.driver_version, log.cuda_version) == ("550.54.15", "12.4")


def test_mig_disabled_and_absent() -> None:
    issues = IssueLog()
    disabled = parse_smi_xml(
        _xml(_gpu_xml("NVIDIA H100 80GB HBM3", "00000000:18:00.0", "Disabled")), "x.xml", issues
    ).gpus[0]
    assert disabled.mig_enabled is False
    old = _xml('<gpu id="0"><product_name>Tesla K80</product_name></gpu>')
    assert parse_smi_xml(old, "x.xml", issues).gpus[0].mig_enabled is None


def test_truncated_capture_names_file_and_line(tmp_path: Path) -> None:
    data = T4_XML.read_bytes()
    cut = data[: len(data) // 2]
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=cut), issues, live=False)
    assert report.gpus == ()
    (issue,) = list(issues)
    assert issue.path == "nvidia-smi-q.xml"
    assert issue.line == cut.count(b"\n") + 1
    assert "malformed XML" in issue.reason


@pytest.mark.parametrize("garbage", [b"\xff" * 8, b"py\x01thon", b"\xc3(\x00"])
def test_garbled_process_name_costs_no_gpu(tmp_path: Path, garbage: bytes) -> None:
    # cwltool PR #1910: concurrent `nvidia-smi -q -x` runs wrote "<process_name>\xff...\xff
    # </process_name> (or other arbitrary bytes)". The T4 capture's second process, line 340
    # (<process_name>python</process_name>), given such a name.
    data = T4_XML.read_bytes()
    assert data.count(b"<process_name>python<") == 1
    data = data.replace(b"<process_name>python<", b"<process_name>" + garbage + b"<")
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=data), issues, live=False)
    (gpu,) = report.gpus
    assert (gpu.name, gpu.memory_bytes, report.driver_version) == (
        "Tesla T4",
        15360 * 2**20,
        "515.105.01",
    )
    (issue,) = list(issues)
    assert (issue.path, issue.line) == (nvidia_smi.XML_NAME, 340)
    assert "replaced by U+FFFD" in issue.reason


def test_attached_gpus_disagreeing_is_an_issue() -> None:
    issues = IssueLog()
    log = parse_smi_xml(_xml(_gpu_xml("Tesla T4", "0"), attached=2), "x.xml", issues)
    assert len(log.gpus) == 1
    assert "attached_gpus> says 2" in reasons(issues)


def test_other_xml_document_is_an_issue() -> None:
    issues = IssueLog()
    assert parse_smi_xml(b"<html><body/></html>", "x.xml", issues).gpus == ()
    assert "root element is html" in reasons(issues)


def test_unknown_gpu_name_leaves_capability_unknown_with_issue(tmp_path: Path) -> None:
    issues = IssueLog()
    xml = _xml(_gpu_xml("NVIDIA Imaginary X9000", "00000000:01:00.0"))
    (gpu,) = probe_gpus(layout(tmp_path, xml=xml), issues, live=False).gpus
    assert gpu.compute_capability is None
    assert "'NVIDIA Imaginary X9000': compute capability unknown" in reasons(issues)


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [
 <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
 <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
]>
<nvidia_smi_log><gpu><product_name>&d;&d;&d;&d;&d;&d;&d;&d;</product_name></gpu></nvidia_smi_log>
"""
XXE = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [ <!ENTITY secret SYSTEM "file:///etc/passwd"> ]>
<nvidia_smi_log><gpu><product_name>&secret;</product_name></gpu></nvidia_smi_log>
"""
PARAMETER_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [ <!ENTITY % remote SYSTEM "http://example.invalid/x.dtd"> %remote; ]>
<nvidia_smi_log/>
"""


@pytest.mark.parametrize(
    "document",
    [
        BILLION_LAUGHS,
        XXE,
        PARAMETER_ENTITY,
        # The same attack in UTF-16, which a byte search for "<!ENTITY" would miss.
        BILLION_LAUGHS.replace(b'version="1.0"?>', b'version="1.0" encoding="UTF-16"?>')
        .decode()
        .encode("utf-16"),
    ],
    ids=["billion-laughs", "xxe", "parameter-entity", "utf16"],
)
def test_entity_declarations_are_refused_before_expansion(document: bytes) -> None:
    issues = IssueLog()
    log = parse_smi_xml(document, "nvidia-smi-q.xml", issues)
    assert log.gpus == ()
    (issue,) = list(issues)
    assert issue.reason.startswith("refused:")
    assert issue.line == 2  # the DOCTYPE line: refused before any entity is used
    assert "passwd" not in issue.reason


def test_external_dtd_reference_alone_is_accepted_and_not_fetched() -> None:
    # The real captures carry `SYSTEM "nvsmi_device_v11.dtd"`; a URL there must not be fetched
    # (the machine has no network to fetch it from, and the test would hang or fail if tried).
    doc = _xml(
        _gpu_xml("Tesla T4", "0"),
        doctype='<!DOCTYPE nvidia_smi_log SYSTEM "http://example.invalid/x.dtd">',
    )
    issues = IssueLog()
    assert [g.name for g in parse_smi_xml(doc, "x.xml", issues).gpus] == ["Tesla T4"]
    assert list(issues) == []


# detect --root T in a child under a 512 MiB address-space limit: what the refused documents
# below cost before the limits (2 GB for the nested one, 1 GB for the flat one, 400 MB for the
# attributes) cannot fit; detect of a real capture peaks at ~20 MB, at the element limit ~100.
_DETECT_UNDER_LIMIT = r"""
import json, resource, sys, time
limit = 512 << 20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from hwtune.probes import detect
started = time.monotonic()
hw = detect(sys.argv[1], tensorflow=False)
print(json.dumps({
    "seconds": time.monotonic() - started,
    "issues": [[i.probe, i.reason, i.path] for i in hw.issues if i.probe == "nvidia-smi"],
}))
"""


@pytest.mark.parametrize(
    ("document", "refusal"),
    [
        # the reviewer's: 4.6 M nested <a>, 14 MB (never closed: the tree was built anyway)
        (b"<nvidia_smi_log>" + b"<a>" * 4_600_000, "nested more than 32 deep"),
        (b"<nvidia_smi_log>" + b"<a/>" * 3_900_000 + b"</nvidia_smi_log>", "more than 256000"),
        (
            b"<nvidia_smi_log><a "
            + b" ".join(b'a%d=""' % i for i in range(1_400_000))
            + b"/></nvidia_smi_log>",
            "'=' signs",
        ),
    ],
    ids=["nested", "siblings", "attributes"],
)
def test_hostile_xml_shapes_are_refused_early_in_little_memory(
    tmp_path: Path, document: bytes, refusal: str
) -> None:
    """The tree was built a node per element with no depth or count limit; now the start
    handler (or, for one giant tag, a count of '=' first) refuses, naming the file."""
    assert len(document) < nvidia_smi.MAX_XML_BYTES  # read in full: it is the shape that costs
    root = layout(tmp_path, xml=document)
    done = subprocess.run(
        [sys.executable, "-c", _DETECT_UNDER_LIMIT, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    (issue,) = result["issues"]
    assert issue[1].startswith("refused:") and refusal in issue[1], issue
    assert issue[2] == nvidia_smi.XML_NAME
    assert result["seconds"] < 5  # 12 s before, for the nested one; ~0.6 s at the count limit


def test_xml_depth_and_element_limits_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    def nested(depth: int) -> bytes:  # nvidia_smi_log is level 1
        return (
            b"<nvidia_smi_log>"
            + b"<a>" * (depth - 1)
            + b"</a>" * (depth - 1)
            + b"</nvidia_smi_log>"
        )

    issues = IssueLog()
    parse_smi_xml(nested(nvidia_smi.MAX_XML_DEPTH), "x.xml", issues)
    assert "refused" not in reasons(issues)
    parse_smi_xml(b"\n" + nested(nvidia_smi.MAX_XML_DEPTH + 1), "x.xml", issues)
    (issue,) = list(issues)
    assert (issue.path, issue.line) == ("x.xml", 2)
    assert "nested more than 32 deep" in issue.reason

    monkeypatch.setattr(nvidia_smi, "MAX_XML_ELEMENTS", 10)
    issues = IssueLog()
    nine = b'<nvidia_smi_log><gpu id="0"><product_name>Tesla T4</product_name></gpu>'
    parse_smi_xml(nine + b"<a/>" * 6 + b"</nvidia_smi_log>", "x.xml", issues)
    assert list(issues) == []  # 1 + 3 (gpu's id counts) + 6 = 10
    parse_smi_xml(nine + b"<a/>" * 7 + b"</nvidia_smi_log>", "x.xml", issues)
    assert "more than 10 elements and attributes" in reasons(issues)


def test_real_captures_are_well_inside_the_xml_limits() -> None:
    """The limits' margin, measured: the deepest real capture nests 7, the largest has 298
    elements for its one GPU."""
    from xml.parsers import expat

    captures = [*GPU_DATA.glob("*.smi"), DATA / "hosts/haswell-tesla-t4-gpu/nvidia-smi-q.xml"]
    assert len(captures) >= 3
    for capture in captures:
        depth, deepest, elements = 0, 0, 0
        parser = expat.ParserCreate()

        def start(tag: str, attrs: dict[str, str]) -> None:
            nonlocal depth, deepest, elements
            depth, elements = depth + 1, elements + 1 + len(attrs)
            deepest = max(deepest, depth)

        def end(tag: str) -> None:
            nonlocal depth
            depth -= 1

        parser.StartElementHandler, parser.EndElementHandler = start, end
        data = capture.read_bytes()
        parser.Parse(data, True)
        gpus = max(1, data.count(b"<gpu "))
        assert deepest * 4 <= nvidia_smi.MAX_XML_DEPTH, capture
        assert elements * 3 <= nvidia_smi.MAX_XML_ELEMENTS_PER_GPU * gpus, capture
        # version=, encoding=, <gpu id=>, and the "=" of command-line options in process names
        names = re.findall(rb"<process_name>(.*?)</process_name>", data)
        in_names = sum(name.count(b"=") for name in names)
        assert data.count(b"=") - in_names <= 2 + gpus, capture
        issues = IssueLog()
        assert parse_smi_xml(data, capture.name, issues).gpus
        assert "refused" not in reasons(issues)


def test_text_in_many_pieces_is_kept_as_one() -> None:
    """expat reports text line by line: 16 MiB of newlines were 16 M strings in one node."""
    doc = nvidia_smi.parse_xml_tree(b"<nvidia_smi_log>" + b"\n" * 100_000 + b"x</nvidia_smi_log>")
    (log,) = doc.children
    assert len(log.text_parts) <= 20 and log.text == "x"


@pytest.mark.parametrize(
    "encoding",
    ["bogus-enc", "shift_jis", "utf-32", "utf-7", "hex", "base64", "rot13", "idna"],
)
def test_an_encoding_expat_cannot_read_is_an_issue_and_topo_still_counts(
    tmp_path: Path, encoding: str
) -> None:
    """pyexpat looks an unknown encoding up among Python's codecs and raised LookupError,
    ValueError or UnicodeError out of the probe, losing the GPUs of the other captures."""
    xml = T4_XML.read_bytes().replace(
        b'<?xml version="1.0" ?>', f'<?xml version="1.0" encoding="{encoding}"?>'.encode(), 1
    )
    assert f'encoding="{encoding}"'.encode() in xml
    issues = IssueLog()
    report = probe_gpus(layout(tmp_path, xml=xml, topo=P4D_TOPO), issues, live=False)
    assert [g.index for g in report.gpus] == list(range(8))  # from topo -m
    assert any(
        i.path == nvidia_smi.XML_NAME and "encoding expat cannot read" in i.reason for i in issues
    ), reasons(issues)


def test_oversized_xml_is_refused_unread(tmp_path: Path) -> None:
    root = layout(tmp_path)
    with (root / nvidia_smi.XML_NAME).open("wb") as f:
        f.write(b"<nvidia_smi_log>")
        f.truncate(nvidia_smi.MAX_XML_BYTES + 10)  # sparse: cheap to create
    issues = IssueLog()
    assert probe_gpus(root, issues, live=False).gpus == ()
    assert "larger than 16 MiB: refused" in reasons(issues)


def test_many_gpu_elements_are_capped() -> None:
    doc = _xml(*["<gpu><product_name>Tesla T4</product_name></gpu>"] * (nvidia_smi.MAX_GPUS + 5))
    issues = IssueLog()
    assert len(parse_smi_xml(doc, "x.xml", issues).gpus) == nvidia_smi.MAX_GPUS
    assert f"kept the first {nvidia_smi.MAX_GPUS}" in reasons(issues)


def test_unreadable_capture_is_an_issue(tmp_path: Path) -> None:
    root = layout(tmp_path)
    (root / nvidia_smi.XML_NAME).mkdir()  # a directory where the file should be
    issues = IssueLog()
    assert probe_gpus(root, issues, live=False).gpus == ()
    assert "nvidia-smi-q.xml:None: cannot read" in reasons(issues)


# ------------------------------------------------------------------ topo -m details

# Constructed in the layout of current drivers: tab separated, an empty cell before
# "GPU NUMA ID", the header underlined with terminal escapes, NIC columns and rows, a legend.
TABBED = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV4\tSYS\tSYS\tPIX\t0-15\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tSYS\tPIX\t0-15\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV2\tSYS\t16-31\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV2\t X \tSYS\t16-31\t1\t\tN/A\n"
    "NIC0\tPIX\tPIX\tSYS\tSYS\t X \t\t\t\t\n\n"
    "Legend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n"
)


def test_nvlink_cliques_with_nics_and_escapes() -> None:
    issues = IssueLog()
    rows = parse_topo(TABBED, "t.txt", issues).rows
    assert list(issues) == []
    peers = {r.index: tuple(link.peer for link in r.links if link.nvlinks) for r in rows}
    assert peers == {0: (1,), 1: (0,), 2: (3,), 3: (2,)}
    assert [(link.peer, link.kind, link.nvlinks) for link in rows[0].links] == [
        (1, "NV4", 4),
        (2, "SYS", 0),
        (3, "SYS", 0),
    ]
    assert [(r.numa_node, r.cpu_affinity[-1]) for r in rows] == [
        (0, 15),
        (0, 15),
        (1, 31),
        (1, 31),
    ]


def test_old_driver_layout_single_gpu_and_soc() -> None:
    # R375-era output: "SOC" for today's SYS and only a "CPU Affinity" trailing column.
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-5\nGPU1\tSOC\t X \t6-11\n"
    rows = parse_topo(text, "t.txt", IssueLog()).rows
    assert rows[0].links[0].kind == "SYS"
    assert rows[1].cpu_affinity == tuple(range(6, 12))
    single = parse_topo(
        "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t0\n", "t", IssueLog()
    ).rows
    assert [(r.index, r.links, r.numa_node) for r in single] == [(0, (), 0)]


def test_a_cell_that_is_no_link_kind_is_an_issue_not_a_link() -> None:
    """Before: any cell was kept as a link kind, so "NV" + 21 digits counted as an NVLink (of
    0 links) and a cell of megabytes was quoted whole in the plan's reason."""
    huge = "Z" * 100_000
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
        f"GPU0\t X \tNV{'9' * 21}\tFOO\t0-7\n"
        f"GPU1\tNV4\t X \t{huge}\t0-7\n"
        "GPU2\tPIX\tSOC\t X \t0-7\n"
    )
    issues = IssueLog()
    rows = parse_topo(text, "t.txt", issues).rows
    assert [[(link.peer, link.kind) for link in r.links] for r in rows] == [
        [],
        [(0, "NV4")],
        [(0, "PIX"), (1, "SYS")],
    ]
    said = [(i.path, i.line, i.reason) for i in issues]
    assert [(p, n) for p, n, _ in said] == [("t.txt", 2), ("t.txt", 2), ("t.txt", 3)], said
    assert "GPU0 to GPU2: 'FOO' is no link kind of the legend" in said[1][2]
    assert all(len(r) < 200 for _, _, r in said), said


def test_short_and_odd_rows_are_issues_with_lines() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV2\t0-7\t0\n"
        "GPU1\tNV2\n"  # cut short
        "GPU2\tNV2\t X \t0-7 extra\t0\n"  # one cell too many
    )
    issues = IssueLog()
    rows = parse_topo(text, "t.txt", issues).rows
    assert [r.index for r in rows] == [0, 2]
    assert rows[1].cpu_affinity == ()  # trailing columns ignored when misaligned
    assert [i.line for i in issues] == [3, 4]


def test_a_repeated_gpu_row_is_an_issue_and_the_first_kept() -> None:
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\n"
        "GPU0\t X \tNV12\t0-7\n"
        "GPU1\tNV12\t X \t8-15\n"
        "GPU0\t X \tSYS\t16-23\n"  # a second capture pasted below the first
    )
    issues = IssueLog()
    rows = parse_topo(text, "t.txt", issues).rows
    assert [(r.index, r.links[0].kind, r.cpu_affinity[0]) for r in rows] == [
        (0, "NV12", 0),
        (1, "NV12", 8),
    ]
    assert reasons(issues) == "t.txt:4: GPU0 has a second row: kept the first (line 2)"


def test_bad_cpu_affinity_and_missing_header() -> None:
    issues = IssueLog()
    parse_topo("\tGPU0\tCPU Affinity\nGPU0\t X \t7-3\n", "t.txt", issues)
    assert "CPU Affinity: range '7-3' runs backwards" in reasons(issues)
    issues = IssueLog()
    assert parse_topo("no matrix here\n", "t.txt", issues).rows == ()
    assert "no GPU0 header line" in reasons(issues)
    issues = IssueLog()
    parse_topo("\tGPU0\tGPU1\tCPU Affinity\n", "t.txt", issues)
    assert "no GPU rows" in reasons(issues)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("GPU0123 \t\nXNVSYSPIX-,/A\x1b[m")), max_size=300))
def test_topo_parser_never_raises(text: str) -> None:
    issues = IssueLog()
    matrix = parse_topo("\tGPU0\tGPU1\tCPU Affinity\n" + text, "t.txt", issues)
    for row in matrix.rows:
        assert all(link.peer != row.index for link in row.links)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(min_value=0, max_value=3000))
def test_xml_parser_never_raises(noise: bytes, cut: int) -> None:
    data = T4_XML.read_bytes()
    issues = IssueLog()
    parse_smi_xml(data[:cut] + noise + data[cut:], "x.xml", issues)


# ------------------------------------------------------------------ the name table


@pytest.mark.parametrize(
    ("name", "capability", "architecture"),
    [
        ("Tesla V100-SXM2-16GB", "7.0", "Volta"),
        ("Tesla T4", "7.5", "Turing"),
        ("NVIDIA A100-SXM4-40GB", "8.0", "Ampere"),
        ("NVIDIA A100 80GB PCIe", "8.0", "Ampere"),
        ("NVIDIA A10G", "8.6", "Ampere"),
        ("NVIDIA A10", "8.6", "Ampere"),
        ("NVIDIA A30", "8.0", "Ampere"),
        ("NVIDIA A40", "8.6", "Ampere"),
        ("NVIDIA RTX A6000", "8.6", "Ampere"),
        ("NVIDIA GeForce RTX 3090", "8.6", "Ampere"),
        # <product_name> in telegraf's testdata/quadro-p400.xml and in the -q -x output posted
        # in a0s/nvidia-smi-exporter issue #1 (Quadro P2000)
        ("Quadro P400", "6.1", "Pascal"),
        ("Quadro P2000", "6.1", "Pascal"),
        ("NVIDIA L4", "8.9", "Ada Lovelace"),
        ("NVIDIA L40", "8.9", "Ada Lovelace"),
        ("NVIDIA L40S", "8.9", "Ada Lovelace"),
        ("NVIDIA GeForce RTX 4090", "8.9", "Ada Lovelace"),
        ("NVIDIA RTX 6000 Ada Generation", "8.9", "Ada Lovelace"),
        ("Quadro RTX 6000", "7.5", "Turing"),
        ("NVIDIA H100 80GB HBM3", "9.0", "Hopper"),
        ("NVIDIA H100 PCIe", "9.0", "Hopper"),
        ("NVIDIA H100 NVL", "9.0", "Hopper"),
        ("NVIDIA H200", "9.0", "Hopper"),
        ("NVIDIA GH200 480GB", "9.0", "Hopper"),
        ("NVIDIA B200", "10.0", "Blackwell"),
        ("NVIDIA GB200", "10.0", "Blackwell"),
        ("NVIDIA GeForce RTX 5090", "12.0", "Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "Blackwell"),
        # vGPU guests: the board and its vGPU type (NVIDIA Virtual GPU Software User Guide,
        # "Virtual GPU Types for Supported GPUs"; GRID names as public nvidia-smi captures show)
        ("GRID V100D-32Q", "7.0", "Volta"),
        ("GRID V100DX-32C", "7.0", "Volta"),
        ("GRID V100-8C", "7.0", "Volta"),
        ("GRID T4-16Q", "7.5", "Turing"),
        ("GRID RTX6000P-24C", "7.5", "Turing"),
        ("GRID RTX8000-48Q", "7.5", "Turing"),
        ("GRID A100D-16C", "8.0", "Ampere"),
        ("GRID A100D-1-20C", "8.0", "Ampere"),
        ("NVIDIA A100DX-80C", "8.0", "Ampere"),
        ("NVIDIA A100X-40C", "8.0", "Ampere"),
        ("NVIDIA A800DX-80C", "8.0", "Ampere"),
        ("NVIDIA A30X-24C", "8.0", "Ampere"),
        ("NVIDIA H100XM-80C", "9.0", "Hopper"),
        ("NVIDIA H100L-94C", "9.0", "Hopper"),
        ("NVIDIA H100XL-94C", "9.0", "Hopper"),
        ("NVIDIA H100XS-64C", "9.0", "Hopper"),
        ("NVIDIA H200X-141C", "9.0", "Hopper"),
        ("NVIDIA H800XM-80C", "9.0", "Hopper"),
        ("NVIDIA H800L-94C", "9.0", "Hopper"),
        ("NVIDIA H20X-141C", "9.0", "Hopper"),
        ("NVIDIA L40S-48C", "8.9", "Ada Lovelace"),
    ],
)
def test_name_table(name: str, capability: str, architecture: str) -> None:
    entry = match_gpu_name(name, gpu_table(IssueLog()))
    assert entry is not None
    assert (entry.compute_capability, entry.architecture) == (capability, architecture)


@pytest.mark.parametrize(
    "name", ["NVIDIA T400", "NVIDIA RTX A1000 Laptop", "NVIDIA A1000", "NVIDIA H100XYZ"]
)
def test_name_table_word_boundaries(name: str) -> None:
    entry = match_gpu_name(name, gpu_table(IssueLog()))
    # "T4" must not match "T400", "A10" not "A1000"; an RTX A-series part is Ampere.
    assert entry is None or entry.key == "RTX A-series"


def test_shipped_table_is_valid_and_sourced() -> None:
    issues = IssueLog()
    table = gpu_table(issues)
    assert list(issues) == []
    assert len(table) == len(load_table("gpus", GpuEntry))
    assert all(entry.source for entry in table)


def test_user_table_entry_wins_and_bad_one_is_an_issue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = [
        {
            "key": "X9000",
            "patterns": [r"\bX9000\b"],
            "compute_capability": "13.0",
            "architecture": "Imaginary",
            "source": "test",
        },
        {
            "key": "broken",
            "patterns": ["(unclosed"],
            "compute_capability": "1.0",
            "architecture": "?",
            "source": "test",
        },
    ]
    (tmp_path / "gpus.json").write_text(json.dumps({"entries": entries}))
    monkeypatch.setenv("HWTUNE_KNOWLEDGE_DIR", str(tmp_path))
    clear_cache()
    try:
        issues = IssueLog()
        table = gpu_table(issues)
        assert match_gpu_name("NVIDIA X9000", table).compute_capability == "13.0"  # type: ignore[union-attr]
        assert "'broken': bad pattern" in reasons(issues)
    finally:
        clear_cache()


# ------------------------------------------------------------------ snapshots


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    """A stand-in `nvidia-smi` executable (a real process) answering from test data."""
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_snapshot_saves_all_three_outputs(tmp_path: Path) -> None:
    exe = fake_nvidia_smi(
        tmp_path,
        f'case "$1" in\n -q) cat "{T4_XML}";;\n topo) cat "{P4D_TOPO}";;\n'
        f' -L) cat "{MIG_LIST}";;\n *) exit 2;;\nesac\n',
    )
    dest = tmp_path / "snap"
    dest.mkdir()
    issues = IssueLog()
    save_gpu_snapshot(dest, issues, nvidia_smi=exe)
    assert list(issues) == []
    assert (dest / nvidia_smi.XML_NAME).read_bytes() == T4_XML.read_bytes()
    assert (dest / nvidia_smi.TOPO_NAME).read_bytes() == P4D_TOPO.read_bytes()
    assert (dest / LIST_NAME).read_bytes() == MIG_LIST.read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [nvidia_smi.XML_NAME, nvidia_smi.TOPO_NAME, LIST_NAME]
    )


def test_snapshot_with_failing_and_hanging_nvidia_smi(tmp_path: Path) -> None:
    failing = fake_nvidia_smi(
        tmp_path,
        "echo \"NVIDIA-SMI has failed because it couldn't "
        'communicate with the NVIDIA driver." >&2\nexit 9\n',
    )
    issues = IssueLog()
    save_gpu_snapshot(tmp_path, issues, nvidia_smi=failing)
    assert "`nvidia-smi -q -x` exited 9: NVIDIA-SMI has failed" in reasons(issues)
    assert not (tmp_path / nvidia_smi.XML_NAME).exists()

    hanging = fake_nvidia_smi(tmp_path, "exec sleep 30\n")
    issues = IssueLog()
    save_gpu_snapshot(tmp_path, issues, nvidia_smi=hanging, timeout_s=0.5)
    assert "did not finish within 0.5 s" in reasons(issues)


def test_snapshot_without_nvidia_smi_is_an_issue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    issues = IssueLog()
    save_gpu_snapshot(tmp_path, issues)
    assert "nvidia-smi not found on PATH" in reasons(issues)
    assert os.listdir(tmp_path) == []
