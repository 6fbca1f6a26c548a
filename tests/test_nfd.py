"""The NFD feature file: label syntax, NFD's parsing rules, expiry, atomic replacement."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.apply import nfd
from hwtune.errors import ApplyError
from hwtune.models.hardware import (
    CpuInfo,
    Gpu,
    GpuLink,
    Hardware,
    Limits,
    NumaNode,
    TensorFlowInfo,
)
from tests.conftest import REPO

# Kubernetes label value and name rules (apimachinery validation.IsValidLabelValue,
# IsQualifiedName): ≤63 chars, [A-Za-z0-9._-], alphanumeric at both ends; prefix a DNS subdomain.
VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def parse_feature_file(text: str, now: datetime) -> dict[str, str]:
    """NFD's local source, line for line (source/local/local.go `parseFeatureFile`): trim each
    line; `#` lines are comments unless they start with `# +` (a directive: expiry-time=RFC3339,
    no-label, no-feature; unknown ones are errors); entries after an expiry in the past are
    dropped; `key[=value]`, the value defaulting to "true". Raises on what NFD would log as an
    error, so a test fails where NFD would complain."""
    expiry = now
    labels: dict[str, str] = {}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                key, sep, value = line[3:].partition("=")
                if key == "expiry-time":
                    assert sep, f"directive without value: {line!r}"
                    expiry = datetime.strptime(value.strip(), RFC3339).replace(tzinfo=timezone.utc)
                elif key not in ("no-label", "no-feature"):
                    raise AssertionError(f"unknown directive {key!r}")
            continue
        if expiry < now:
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels


def zen4_node() -> Hardware:
    flags = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "sse4_2")
    return Hardware(
        cpu=CpuInfo(
            arch="x86_64",
            vendor="AuthenticAMD",
            microarch="znver4",
            x86_64_level=4,
            flags=flags,
            smt_enabled=True,
        ),
        limits=Limits(usable_cpus=(0, 1), effective_cpus=2),
        numa=(NumaNode(0, (0, 1)),),
        tensorflow=TensorFlowInfo(
            version="2.21.0",
            distribution="tensorflow-cpu",
            threading_runtime="eigen",
            onednn_default=True,
        ),
    )


def test_labels_of_a_cpu_node() -> None:
    found = nfd.labels(zen4_node())
    assert found["cpu-microarch"] == "znver4"
    assert found["x86-64-level"] == "4"
    assert found["avx512-bf16"] == "true"
    assert found["effective-cpus"] == "2"
    assert found["tensorflow-version"] == "2.21.0"
    assert found["tensorflow-runtime"] == "eigen"
    assert "amx" not in found  # absent features are left out, not labelled false
    assert "gpu-count" not in found


def test_unknown_tensorflow_facts_are_left_out() -> None:
    """A tensorflow/ package without pip metadata: "unknown" is no value to select on."""
    from dataclasses import replace

    node = zen4_node()
    assert node.tensorflow is not None
    bare = replace(
        node, tensorflow=replace(node.tensorflow, version="unknown", distribution="unknown")
    )
    found = nfd.labels(bare)
    assert "tensorflow-version" not in found and "tensorflow-distribution" not in found
    assert found["tensorflow-runtime"] == "eigen"


def _gpu(
    index: int, peers: tuple[int, ...] = (), cc: str = "9.0", name: str = "NVIDIA H100 80GB HBM3"
) -> Gpu:
    return Gpu(
        index=index,
        name=name,
        compute_capability=cc,
        architecture="Hopper",
        memory_bytes=80 << 30,
        nvlink_peers=peers,
    )


def test_gpu_labels_and_cliques() -> None:
    # Two NVLink pairs (0-1, 2-3) that reach each other only over PCIe: cliques of 2.
    gpus = (_gpu(0, (1,)), _gpu(1, (0,)), _gpu(2, (3,)), _gpu(3, (2,)))
    hw = Hardware(gpus=gpus, cuda_driver_version="12.4")
    found = nfd.labels(hw)
    assert found["gpu-count"] == "4"
    assert found["gpu-cc"] == "9.0"
    assert found["gpu-product"] == "NVIDIA-H100-80GB-HBM3"
    assert found["gpu-family"] == "hopper"
    assert found["gpu-memory-mib"] == str(80 * 1024)
    assert found["nvlink-clique-size"] == "2"
    assert found["cuda-driver"] == "12.4"


def test_mixed_gpus_label_the_lowest_capability() -> None:
    hw = Hardware(gpus=(_gpu(0, cc="8.0", name="A100"), _gpu(1, cc="9.0", name="H100")))
    found = nfd.labels(hw)
    assert (found["gpu-cc"], found["gpu-cc-max"]) == ("8.0", "9.0")
    assert "gpu-product" not in found  # not uniform


def test_clique_size() -> None:
    # p4d-style: 8 GPUs all joined by NVSwitch (links NV12) form one clique of 8.
    full = tuple(
        Gpu(index=i, name="A100", links=tuple(GpuLink(j, "NV12", 12) for j in range(8) if j != i))
        for i in range(8)
    )
    assert nvlink(full) == 8
    # A ring of 4 (0-1-2-3-0) has no triangle: the largest clique is 2.
    ring = tuple(_gpu(i, ((i + 1) % 4, (i - 1) % 4)) for i in range(4))
    assert nvlink(ring) == 2
    # One-sided reports still count as an edge; no NVLink at all gives 1.
    assert nvlink((_gpu(0, (1,)), _gpu(1))) == 2
    assert nvlink((_gpu(0), _gpu(1))) == 1
    assert nvlink(()) == 0
    # PCIe links (PIX, SYS) are not NVLink.
    pcie = tuple(Gpu(index=i, name="T4", links=(GpuLink(1 - i, "PIX"),)) for i in range(2))
    assert nvlink(pcie) == 1


def nvlink(gpus: tuple[Gpu, ...]) -> int:
    return nfd.nvlink_clique_size(gpus)


def test_clique_size_of_a_large_nvswitch_board_is_quick() -> None:
    """All 32 GPUs joined: without a pivot the search visited all 2^32 subsets (a second at
    20 GPUs, hours at 32), and `hwtune nfd` or the daemon's refresh hung. Run apart, so that
    the old behaviour fails on the timeout instead of hanging the suite."""
    code = (
        "from hwtune.apply.nfd import nvlink_clique_size\n"
        "from tests.plan_builders import make_gpus\n"
        "print(nvlink_clique_size(make_gpus(32)), nvlink_clique_size(make_gpus(64)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("nvlink_clique_size took over 30 s for 32 fully connected GPUs")
    assert done.stdout.split() == ["32", "64"], done.stderr


@given(st.sets(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=28))
def test_clique_size_is_the_largest_clique(edges: set[tuple[int, int]]) -> None:
    """Against brute force over every subset of 8 GPUs."""
    pairs = {frozenset(e) for e in edges if e[0] != e[1]}
    gpus = tuple(
        Gpu(index=i, name="A100", nvlink_peers=tuple(j for j in range(8) if {i, j} in pairs))
        for i in range(8)
    )
    best = max(
        len(group)
        for group in ([i for i in range(8) if mask >> i & 1] for mask in range(1, 256))
        if all(frozenset((a, b)) in pairs for a in group for b in group if a < b)
    )
    assert nvlink(gpus) == best


@given(st.text(max_size=200))
def test_label_value_is_always_valid(raw: str) -> None:
    value = nfd.label_value(raw)
    assert len(value) <= 63
    assert VALUE.match(value), value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("2.21.0+cu121", "2.21.0-cu121"),
        ("  (intel) ", "intel"),
        (True, "true"),
        ("_.-", ""),
        ("x" * 70 + "-y", "x" * 63),
        ("a" * 62 + "-b", "a" * 62),  # truncation must not leave a trailing '-'
    ],
)
def test_label_value_examples(raw: object, expected: str) -> None:
    assert nfd.label_value(raw) == expected


def test_rendered_file_parses_under_nfd_rules() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    found = nfd.labels(zen4_node())
    text = nfd.render(found, expiry=now + timedelta(minutes=2), generated=now)
    assert "# +expiry-time=2026-01-02T03:06:05Z" in text
    parsed = parse_feature_file(text, now)
    assert parsed == {f"{nfd.PREFIX}/{k}": v for k, v in found.items()}
    for key, value in parsed.items():
        prefix, _, name = key.partition("/")
        assert DNS_SUBDOMAIN.match(prefix) and NAME.match(name) and len(name) <= 63, key
        assert VALUE.match(value), (key, value)
    # Past the expiry NFD drops every label.
    assert parse_feature_file(text, now + timedelta(minutes=3)) == {}


def test_write_is_atomic_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = nfd.write_feature_file(tmp_path, "hwtune.io/a=1\n")
    assert target == tmp_path / "hwtune"
    seen: list[str] = []
    stop = threading.Event()

    def reader() -> None:  # NFD's view: whenever it reads, a whole file, old or new
        while not stop.is_set():
            seen.append(target.read_text())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(200):
            nfd.write_feature_file(tmp_path, f"hwtune.io/a={i}\n" + "hwtune.io/pad=x\n" * 50)
    finally:
        stop.set()
        thread.join()
    assert all(s.startswith("hwtune.io/a=") and s.endswith("\n") for s in seen)
    assert {s.count("\n") for s in seen} <= {1, 51}
    assert os.listdir(tmp_path) == ["hwtune"]  # temporaries were dotfiles and are gone
    assert (target.stat().st_mode & 0o777) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks of others' directories are root's")
def test_as_root_a_feature_directory_another_user_controls_is_refused(tmp_path: Path) -> None:
    """The daemon writes features.d as root: a link another user owns must not choose where
    root creates the file (the same check as apply's output directory, hwtune.fs.guard)."""
    theirs, victim = tmp_path / "theirs", tmp_path / "victim"
    theirs.mkdir()
    victim.mkdir(mode=0o700)
    (theirs / "features.d").symlink_to(victim)
    os.chown(theirs, 65534, 65534)
    os.lchown(theirs / "features.d", 65534, 65534)
    with pytest.raises(ApplyError, match=r"theirs: it is owned by"):
        nfd.write_feature_file(theirs / "features.d", "hwtune.io/a=1\n")
    assert list(victim.iterdir()) == []
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)  # anyone may swap files in it
    with pytest.raises(ApplyError, match="open"):
        nfd.write_feature_file(tmp_path / "open", "hwtune.io/a=1\n")
    assert list((tmp_path / "open").iterdir()) == []


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="65536"):
        nfd.write_feature_file(tmp_path, "hwtune.io/x=y\n" * 6000)
    assert not (tmp_path / "hwtune").exists()


def test_nfd_command_prints_and_writes(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    printed = cli(["nfd", "--print", "--ttl", "600"])
    assert printed.exit_status == 0, printed.stderr
    labels = parse_feature_file(printed.stdout, datetime.now(timezone.utc))
    assert labels[f"{nfd.PREFIX}/arch"]
    assert int(labels[f"{nfd.PREFIX}/effective-cpus"]) >= 1
    written = cli(["nfd", "--output", str(tmp_path)])
    assert written.exit_status == 0, written.stderr
    text = (tmp_path / "hwtune").read_text()
    assert "+expiry-time" not in text  # one-shot without --ttl: no expiry
    assert parse_feature_file(text, datetime.now(timezone.utc)) == labels


def test_facts_a_bare_tree_lacks_are_not_labelled(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """A root with nothing to read: no `arch=unknown`, and no `effective-cpus=1` the limits
    probe never measured (a node selector on either would match by accident)."""
    printed = cli(["nfd", "--root", str(tmp_path), "--print"])
    assert printed.exit_status == 0, printed.stderr
    labels = parse_feature_file(printed.stdout, datetime.now(timezone.utc))
    assert f"{nfd.PREFIX}/arch" not in labels, labels
    assert f"{nfd.PREFIX}/effective-cpus" not in labels, labels


def test_expiry_is_never_stamped_earlier_than_asked(cli) -> None:  # type: ignore[no-untyped-def]
    """The stamp has whole seconds: the expiry is rounded up, not truncated below the TTL."""
    now = datetime(2026, 1, 1, 12, 0, 0, 700_000, tzinfo=timezone.utc)
    assert nfd.rfc3339(nfd.expiry_after(now, 60)) == "2026-01-01T12:01:01Z"
    before = datetime.now(timezone.utc)
    printed = cli(["nfd", "--print", "--ttl", "60"])
    assert printed.exit_status == 0, printed.stderr
    stamp = next(ln for ln in printed.stdout.splitlines() if ln.startswith("# +expiry-time="))
    expiry = datetime.strptime(stamp.split("=", 1)[1], RFC3339).replace(tzinfo=timezone.utc)
    assert expiry >= before + timedelta(seconds=60)


def test_nfd_command_reports_an_unwritable_directory(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(["nfd", "--output", str(tmp_path / "missing")])
    assert result.exit_status == 1
    assert "missing" in result.stderr and "--print" in result.stderr


@pytest.mark.skipif(
    os.path.isdir(nfd.DEFAULT_DIR), reason="Node Feature Discovery's features.d exists here"
)
def test_nfd_without_nfd_says_how_to_use_output_or_print(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(["nfd"])
    assert result.exit_status == 1
    assert "does not exist" in result.stderr
    assert "--output DIR" in result.stderr and "--print" in result.stderr
