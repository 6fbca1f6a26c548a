"""hwtune's feature file as Node Feature Discovery reads it (tests/nfd_rules.py, from NFD's
source), for real captures, hand-built machines and hostile values.

The rules are first checked against NFD's own test data (tests/data/nfd, SOURCES.md): the
counts NFD's `TestGetExpirationDate` expects and the cases of its `TestParseDirectives`.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hwtune.apply import nfd
from hwtune.errors import HwtuneError
from hwtune.models.hardware import CpuInfo, Hardware, TensorFlowInfo
from hwtune.probes import detect, nvidia_smi
from tests import gpu_roots
from tests.conftest import DATA
from tests.nfd_rules import (
    master_rejects,
    parse_feature_file,
    parse_rfc3339,
    read_features_dir,
    selector_matches,
    worker_rejects,
)
from tests.plan_builders import make_gpus, make_hardware, p4d_hardware, tf_info

NFD_DATA = DATA / "nfd" / "features.d"
HOSTS = sorted(p for p in (DATA / "hosts").iterdir() if p.is_dir())
NOW = datetime(2026, 9, 5, 12, 0, 0, 250_000, tzinfo=timezone.utc)


# ---------------------------------------------------------------- the rules, on NFD's data
def test_rules_reproduce_nfd_own_expectations() -> None:
    """local_test.go `TestGetExpirationDate`: 7 features, 8 labels from this directory (the
    dotfile skipped, the expired entries dropped, the unparsable expiry logged and ignored)."""
    parsed = read_features_dir(NFD_DATA, datetime.now(timezone.utc))
    assert (len(parsed.features), len(parsed.labels)) == (7, 8)
    assert "hiddenFeatureKey" not in parsed.labels
    assert {"featureKeyExpired", "featureKey", "featureKey4"}.isdisjoint(parsed.labels)
    assert parsed.labels["featureKeyUnparsable"] == "featureValue"  # kept: expiry stays "now"
    assert "label-only" in parsed.labels and "label-only" not in parsed.features
    assert "foo" not in parsed.labels and parsed.features["foo"] == "baz"
    assert any("unparsable_expiry_comment" in e for e in parsed.errors), parsed.errors


def test_rules_skip_a_file_over_64_kib_whole(tmp_path: Path) -> None:
    """As NFD's big_file (70 kB, not copied): over MaxFeatureFileSize, no line is read."""
    (tmp_path / "big").write_text("vendor.io/a=b\n" + "x" * 65536)
    (tmp_path / "exact").write_text("vendor.io/c=d\n".ljust(65535, "#") + "\n")
    parsed = read_features_dir(tmp_path, NOW)
    assert parsed.labels == {"vendor.io/c": "d"}
    assert any("size limit" in e for e in parsed.errors)


@pytest.mark.parametrize(
    ("directive", "fails"),
    [  # local_test.go TestParseDirectives
        ("# +expiry-time=2080-07-28T11:22:33Z", False),
        ("# +random-key=random-value", True),
        ("# + Something", True),
    ],
)
def test_rules_parse_directives_as_nfd(directive: str, fails: bool) -> None:
    assert bool(parse_feature_file(directive + "\n", NOW).errors) == fails


@pytest.mark.parametrize(
    "stamp",
    ["2026-09-05T12:00:00", "2026-9-5T12:00:00Z", "2026-09-05 12:00:00Z", "2026-02-30T12:00:00Z"],
)
def test_rules_refuse_what_go_rfc3339_refuses(stamp: str) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(stamp)
    assert parse_rfc3339("2026-09-05T14:00:00.5+02:00") == NOW + timedelta(seconds=0.25)


@pytest.mark.parametrize(
    ("name", "value", "by_worker"),
    [
        ("hwtune.io/x", "a" * 64, True),
        ("hwtune.io/x", "ends-", True),
        ("hwtune.io/x", "has space", True),
        ("hwtune.io/x", "trailing\n", True),
        ("hwtune.io/" + "n" * 64, "v", True),
        ("HWTUNE.io/x", "v", True),
        ("node.kubernetes.io/x", "v", False),  # syntax fine, namespace refused by the master
        ("x", "v", False),
    ],
)
def test_rules_reject_what_nfd_drops(name: str, value: str, by_worker: bool) -> None:
    assert master_rejects(name, value)
    assert bool(worker_rejects(name, value)) == by_worker


# ---------------------------------------------------------------- hwtune's file
def _check(found: dict[str, str], expiry_after_s: float = 600.0) -> None:
    """Render as `hwtune nfd --ttl` does and read it back as NFD: every label survives, no
    directive error, the expiry is the stamped moment, and after it nothing is left."""
    expiry = nfd.expiry_after(NOW, expiry_after_s)
    text = nfd.render(found, expiry=expiry, generated=NOW)
    parsed = parse_feature_file(text, NOW)
    assert parsed.errors == []
    assert parsed.labels == {f"{nfd.PREFIX}/{k}": v for k, v in found.items()}
    for key, value in parsed.labels.items():
        assert worker_rejects(key, value) == [] and master_rejects(key, value) == [], (key, value)
    stamp = next(ln for ln in text.splitlines() if ln.startswith("# +expiry-time="))
    assert parse_rfc3339(stamp.partition("=")[2]) == expiry >= NOW + timedelta(seconds=600)
    assert parse_feature_file(text, expiry + timedelta(seconds=1)).labels == {}
    assert len(text.encode()) <= 65536


@pytest.mark.parametrize("host", HOSTS, ids=lambda p: p.name)
def test_every_capture_is_read_whole_by_nfd(host: Path, cli) -> None:  # type: ignore[no-untyped-def]
    printed = cli(["nfd", "--root", str(host), "--print", "--ttl", "600"])
    assert printed.exit_status == 0, printed.stderr
    parsed = parse_feature_file(printed.stdout, datetime.now(timezone.utc))
    assert parsed.errors == []
    assert f"{nfd.PREFIX}/arch" in parsed.labels
    for key, value in parsed.labels.items():
        assert worker_rejects(key, value) == [] and master_rejects(key, value) == [], (key, value)


def _labels_with_plan(hw: Hardware) -> dict[str, str]:
    from hwtune.pipeline.request import PlanRequest, profile_for

    try:
        profile = profile_for(PlanRequest({}, hardware=hw)).profile
    except HwtuneError:
        profile = None
    return nfd.labels(hw, profile)


GPU_ROOTS = {
    "t4": {"cpu": gpu_roots.T4_HOST, "xml": gpu_roots.T4_XML},
    "a100-mig": {
        "cpu": gpu_roots.EPYC,
        "xml": gpu_roots.A100_MIG_XML,
        "topo": gpu_roots.A100_TOPO,
    },
    "8xa100-mig-list": {"cpu": gpu_roots.EPYC, "listing": gpu_roots.MIG_LIST},
    "8xa100-mixed-mig": {"cpu": gpu_roots.EPYC, "listing": gpu_roots.MIXED_MIG_LIST},
    "rtx-pro-blackwell": {"cpu": gpu_roots.HASWELL, "xml": gpu_roots.BLACKWELL_XML},
    "p5-8xh100": {"cpu": gpu_roots.EPYC, "topo": gpu_roots.H100_TOPO},
    "8xl40s": {"cpu": gpu_roots.EPYC, "topo": gpu_roots.L40S_TOPO},
    "k80": {"cpu": gpu_roots.HASWELL, "listing": gpu_roots.K80_LIST},
    # schema v11, no <product_architecture>, processes whose command lines hold "="
    "gt-1030": {
        "cpu": gpu_roots.HASWELL,
        "xml": gpu_roots.GPU / "telegraf-geforce-gt-1030-v11.smi",
    },
    # a GB200 tray's topo -m alone: no product names, GPU2 and GPU3 without CPU affinity
    "gb200-topo": {
        "cpu": gpu_roots.EPYC,
        "topo": gpu_roots.GPU / "aiconfigurator-gb200-4gpu.topo",
    },
}


@pytest.mark.parametrize("name", sorted(GPU_ROOTS))
def test_gpu_roots_are_read_whole_by_nfd(name: str, tmp_path: Path) -> None:
    found = _labels_with_plan(gpu_roots.hardware(tmp_path, **GPU_ROOTS[name]))  # type: ignore[arg-type]
    assert "gpu-count" in found
    _check(found)


def _hostile() -> dict[str, Hardware]:
    """Values a probe may pass on: long brand strings, dots, spaces, '+', '/', '=', '#',
    non-ASCII, N/A, a nightly TensorFlow, an empty vendor after folding."""
    long_model = "Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz, 56 cores, with a very long suffix"
    base = make_hardware(sockets=2, cores_per_socket=4, smt=2, tensorflow=tf_info())
    cpu: CpuInfo = base.cpu
    odd_name = "NVIDIA GeForce RTX 5090 D v2 (β) / 32 GB = big # card"
    gpus = tuple(replace(g, name=odd_name, architecture="N/A") for g in make_gpus(2, cc="12.0"))
    tf = TensorFlowInfo(
        version="2.22.0.dev20260905",
        distribution="tf-nightly",
        cuda_build=True,
        threading_runtime="eigen",
    )
    return {
        "long-model": replace(base, cpu=replace(cpu, vendor=long_model, microarch=long_model)),
        "dotted-microarch": replace(base, cpu=replace(cpu, microarch="armv8.2-a+sve.v1.")),
        "gpu-names": replace(base, gpus=gpus, cuda_driver_version="N/A", tensorflow=tf),
        "unicode-only": replace(base, cpu=replace(cpu, vendor="沐曦", microarch="=#=")),
        "arm": make_hardware(
            arch="aarch64", microarch="neoverse_v2", flags=("sve", "sve2", "bf16", "i8mm")
        ),
        "p4d": p4d_hardware(),
    }


@pytest.mark.parametrize("name", sorted(_hostile()))
def test_hostile_values_are_read_whole_by_nfd(name: str) -> None:
    _check(_labels_with_plan(_hostile()[name]))


def test_gpu_name_with_spaces_is_folded_not_dropped() -> None:
    found = nfd.labels(_hostile()["gpu-names"])
    assert found["gpu-product"].startswith("NVIDIA-GeForce-RTX-5090-D-v2")
    assert found["tensorflow-version"] == "2.22.0.dev20260905"


def test_the_temporary_file_is_a_dotfile_beside_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFD skips names starting with "." (getFeaturesFromFiles), so it never reads the file
    half-written; the rename stays within features.d, so it is atomic."""
    renames: list[tuple[str, str]] = []
    real = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        renames.append((os.fspath(src), os.fspath(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    nfd.write_feature_file(tmp_path, nfd.render({"a": "1"}))
    ((src, dst),) = renames
    assert Path(dst) == tmp_path / nfd.FILE_NAME
    assert Path(src).parent == tmp_path and Path(src).name.startswith(".")
    assert read_features_dir(tmp_path, NOW).labels == {f"{nfd.PREFIX}/a": "1"}


# ---------------------------------------------------------------- fields nvidia-smi leaves out

H200 = DATA / "hosts" / "kvm-emeraldrapids-h200"


def _h200_root(tmp_path: Path, tag: str, text: str) -> Path:
    """The live H200 capture with the first `<tag>` of its `nvidia-smi -q -x` set to `text`,
    a form nvidia-smi prints where it has no value."""
    root = tmp_path / "h200"
    shutil.copytree(H200, root, symlinks=True)
    xml = root / "nvidia-smi-q.xml"
    changed, count = re.subn(
        rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{text}</{tag}>", xml.read_text(), count=1
    )
    assert count == 1, tag
    xml.write_text(changed)
    return root


@pytest.mark.parametrize(
    ("tag", "text", "label", "filled"),
    [
        ("product_name", "N/A", "gpu-product", False),  # the probe names it "GPU 0"
        # The probe takes no placeholder for an architecture, so the gpus name table gives
        # the real one (H200: Hopper), as for a capture without <product_architecture>.
        ("product_architecture", "[Not Supported]", "gpu-family", True),
        ("product_architecture", "Not Supported", "gpu-family", True),
        ("cuda_version", "Not Supported", "cuda-driver", False),
        ("cuda_version", "[Unknown Error]", "cuda-driver", False),
    ],
)
def test_a_gpu_field_nvidia_smi_does_not_report_is_never_a_label_value(
    tag: str,
    text: str,
    label: str,
    filled: bool,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    whole = cli(["nfd", "--root", str(H200), "--print"])
    assert whole.exit_status == 0, whole.stderr
    as_taken = parse_feature_file(whole.stdout, NOW).labels
    assert f"{nfd.PREFIX}/{label}" in as_taken  # the capture as taken has the label
    printed = cli(["nfd", "--root", str(_h200_root(tmp_path, tag, text)), "--print"])
    assert printed.exit_status == 0, printed.stderr
    parsed = parse_feature_file(printed.stdout, NOW)
    key = f"{nfd.PREFIX}/{label}"
    assert parsed.labels.get(key) == (as_taken[key] if filled else None), parsed.labels
    assert parsed.labels[f"{nfd.PREFIX}/gpu-count"] == "1"
    for key, value in parsed.labels.items():
        assert worker_rejects(key, value) == [] and master_rejects(key, value) == [], (key, value)


def test_gpu_memory_is_left_out_when_one_gpu_does_not_report_it(tmp_path: Path) -> None:
    """The least memory of the GPUs that report it is not the node's least: a second H200 of
    the capture whose size is "N/A" (parse_size: None) could be the smaller."""
    hw = detect(H200)
    (gpu,) = hw.gpus
    assert nfd.labels(hw)["gpu-memory-mib"] == "143771"
    unsized = replace(gpu, index=1, memory_bytes=nvidia_smi.parse_size("N/A"))
    assert "gpu-memory-mib" not in nfd.labels(replace(hw, gpus=(gpu, unsized)))


# ---------------------------------------------------------------- NVLink, known or not


def test_nvlink_clique_size_needs_every_gpus_links(tmp_path: Path) -> None:
    """The 8 x A100 node's `nvidia-smi -L` alone names its GPUs but no link between them; its
    own `topo -m` shows NV12 between every pair. Without the matrix, "1" (no NVLink) was
    labelled; the size is unknown then, and so it is when two GPUs' links are missing."""
    (tmp_path / "listed").mkdir()
    (tmp_path / "linked").mkdir()
    listed = detect(
        gpu_roots.root(tmp_path / "listed", gpu_roots.EPYC, listing=gpu_roots.MIXED_MIG_LIST)
    )
    assert len(listed.gpus) == 8
    assert "nvlink-clique-size" not in nfd.labels(listed)
    linked = detect(
        gpu_roots.root(
            tmp_path / "linked",
            gpu_roots.EPYC,
            topo=gpu_roots.A100_TOPO,
            listing=gpu_roots.MIXED_MIG_LIST,
        )
    )
    assert nfd.labels(linked)["nvlink-clique-size"] == "8"
    # GPU 7 with its row of the matrix lost: the other rows still name their NV12 to it.
    lost = [replace(g, links=(), nvlink_peers=()) for g in linked.gpus]
    gpus = (*linked.gpus[:7], lost[7])
    assert nfd.labels(replace(linked, gpus=gpus))["nvlink-clique-size"] == "8"
    # GPUs 6 and 7 without rows: whether they are linked to each other is not known.
    gpus = (*linked.gpus[:6], lost[6], lost[7])
    assert "nvlink-clique-size" not in nfd.labels(replace(linked, gpus=gpus))


# ---------------------------------------------------------------- compute capability, comparable

CAPABILITY_ROOTS = {  # capability from the name table, as the sm_ number nvcc builds for
    "t4": ({"cpu": gpu_roots.T4_HOST, "xml": gpu_roots.T4_XML}, "7.5", "75"),
    "a100-mig": ({"cpu": gpu_roots.EPYC, "xml": gpu_roots.A100_MIG_XML}, "8.0", "80"),
    "rtx-pro-blackwell": (
        {"cpu": gpu_roots.HASWELL, "xml": gpu_roots.BLACKWELL_XML},
        "12.0",
        "120",
    ),
    "k80": ({"cpu": gpu_roots.HASWELL, "listing": gpu_roots.K80_LIST}, "3.7", "37"),
}


@pytest.mark.parametrize("name", sorted(CAPABILITY_ROOTS))
def test_compute_capability_has_a_form_gt_and_lt_can_compare(
    name: str,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    """`gpu-cc` ("8.0") is no integer, so a node selector `Gt`/`Lt` on it matches no node;
    `gpu-sm` ("80") is, and orders as the capabilities do (12.0 after 8.9 after 8.0)."""
    parts, cc, sm = CAPABILITY_ROOTS[name]
    root = gpu_roots.root(tmp_path, **parts)  # type: ignore[arg-type]
    printed = cli(["nfd", "--root", str(root), "--print"])
    assert printed.exit_status == 0, printed.stderr
    found = parse_feature_file(printed.stdout, NOW).labels
    key = f"{nfd.PREFIX}/gpu-sm"
    assert (found[f"{nfd.PREFIX}/gpu-cc"], found[key]) == (cc, sm)
    assert worker_rejects(key, sm) == [] and master_rejects(key, sm) == []
    assert not selector_matches(found, f"{nfd.PREFIX}/gpu-cc", "Gt", "0")
    # "at least 8.0" is `Gt 79`: true exactly when the capability is 8.0 or above
    assert selector_matches(found, key, "Gt", "79") == (float(cc) >= 8.0)
    assert selector_matches(found, key, "Lt", "80") == (float(cc) < 8.0)


def test_mixed_gpus_give_the_lowest_and_highest_as_integers(tmp_path: Path) -> None:
    """A node with the A100 of one capture and the RTX PRO Blackwell of another."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a100 = detect(gpu_roots.root(tmp_path / "a", gpu_roots.EPYC, xml=gpu_roots.A100_MIG_XML))
    pro = detect(gpu_roots.root(tmp_path / "b", gpu_roots.EPYC, xml=gpu_roots.BLACKWELL_XML))
    both = replace(a100, gpus=(a100.gpus[0], replace(pro.gpus[0], index=1)))
    found = nfd.labels(both)
    assert (found["gpu-cc"], found["gpu-cc-max"]) == ("8.0", "12.0")
    assert (found["gpu-sm"], found["gpu-sm-max"]) == ("80", "120")
    assert [nfd.sm_number(c) for c in ("8.0", "8.9", "9.0", "10.0", "12.1")] == [
        80,
        89,
        90,
        100,
        121,
    ]
    assert nfd.sm_number("8.10") is None and nfd.sm_number("N/A") is None


def test_capability_labels_need_every_gpus_capability(tmp_path: Path) -> None:
    """The A100 of one capture beside a GPU of the 4 x GB200 node's `topo -m`, which names
    no product, so its capability is unknown: 8.0, the least of the capabilities known, was
    labelled as the node's lowest, though the other GPU may be older."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a100 = detect(gpu_roots.root(tmp_path / "a", gpu_roots.EPYC, xml=gpu_roots.A100_MIG_XML))
    topo = gpu_roots.GPU / "aiconfigurator-gb200-4gpu.topo"
    unnamed = detect(gpu_roots.root(tmp_path / "b", gpu_roots.EPYC, topo=topo)).gpus[1]
    assert (a100.gpus[0].compute_capability, unnamed.compute_capability) == ("8.0", None)
    found = nfd.labels(replace(a100, gpus=(a100.gpus[0], unnamed)))
    assert found["gpu-count"] == "2"
    assert {"gpu-cc", "gpu-sm", "gpu-cc-max", "gpu-sm-max"}.isdisjoint(found), found
    assert (nfd.labels(a100)["gpu-cc"], nfd.labels(a100)["gpu-sm"]) == ("8.0", "80")
