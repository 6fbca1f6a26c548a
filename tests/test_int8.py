"""int8 inference eligibility: real captures and TensorFlow installs against the routes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwtune.apply import nfd
from hwtune.models.hardware import Gpu, Hardware
from hwtune.models.overrides import Overrides
from hwtune.planner import plan
from hwtune.planner.knowledge import load_knowledge
from hwtune.probes import detect
from tests import gpu_roots
from tests.conftest import DATA, run_cli
from tests.plan_builders import CASCADELAKE_FLAGS, make_hardware, tf_info

HOSTS = DATA / "hosts"
KNOWLEDGE = load_knowledge(extra_dirs=())


def _routes(hw: Hardware, **intent: object) -> list[tuple[str, str, str, bool]]:
    profile = plan(hw, knowledge=KNOWLEDGE, **intent)  # type: ignore[arg-type]
    assert profile.int8 is not None
    return [(r.device, r.feature, r.route, r.usable) for r in profile.int8.routes]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (
            "alamb-gcp-c3-xeon8481c-spr-vm",
            [
                ("cpu", "AVX512-VNNI", "oneDNN int8 kernels", True),
                ("cpu", "AVX512-VNNI", "TFLite/LiteRT with XNNPACK", True),
            ],
        ),
        (
            "utillinux-x86_64-meteor_lake",
            [
                ("cpu", "AVX-VNNI", "oneDNN int8 kernels", True),
                ("cpu", "AVX-VNNI", "TFLite/LiteRT with XNNPACK", True),
            ],
        ),
        (
            "archspec-amazon-graviton2",
            [("cpu", "Arm dot product (SDOT/UDOT)", "TFLite/LiteRT with XNNPACK", True)],
        ),
        ("spack-rhel7-haswell", []),
        ("cpufeatures-ppc64le-power9-w8-fragment", []),
    ],
)
def test_cpu_routes_on_captures(host: str, expected: list[tuple[str, str, str, bool]]) -> None:
    hw = detect(HOSTS / host)
    assert _routes(hw) == expected
    profile = plan(hw, knowledge=KNOWLEDGE)
    assert profile.int8 is not None
    assert profile.int8.eligible == bool(expected)


def test_a_cpu_without_dot_products_says_why_in_its_own_terms() -> None:
    haswell = plan(detect(HOSTS / "spack-rhel7-haswell"), knowledge=KNOWLEDGE).int8
    power9 = plan(
        detect(HOSTS / "cpufeatures-ppc64le-power9-w8-fragment"), knowledge=KNOWLEDGE
    ).int8
    assert haswell is not None and power9 is not None
    assert "three x86 instructions per VNNI one" in haswell.reason
    assert "x86" not in power9.reason  # no x86 figure on a POWER machine


def test_onednn_route_needs_onednn_on() -> None:
    hw = make_hardware(cores_per_socket=8, flags=CASCADELAKE_FLAGS)
    off = Overrides(env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    profile = plan(hw, overrides=off, knowledge=KNOWLEDGE)
    assert profile.int8 is not None
    by_route = {r.route: r for r in profile.int8.routes}
    assert not by_route["oneDNN int8 kernels"].usable
    assert "TF_ENABLE_ONEDNN_OPTS=0" in by_route["oneDNN int8 kernels"].note
    assert by_route["TFLite/LiteRT with XNNPACK"].usable  # XNNPACK does not need oneDNN
    on = plan(hw, knowledge=KNOWLEDGE).int8
    assert on is not None
    assert all(r.usable for r in on.routes)


def test_gpu_capabilities_from_real_captures(tmp_path: Path) -> None:
    (tmp_path / "t4").mkdir()
    (tmp_path / "k80").mkdir()
    # the T4's driver (CUDA 11.7) runs TensorFlow 2.14 (CUDA 11.8), the last with TF-TRT in reach
    t4 = detect(gpu_roots.t4_under_cuda_11(tmp_path / "t4"))
    assert [r[1:3] for r in _routes(t4) if r[0].startswith("gpu")] == [
        ("INT8 Tensor Cores", "TF-TRT INT8")
    ]
    # A K80 (compute capability 3.7) has neither DP4A nor int8 tensor cores (and current
    # TensorFlow does not run on it at all).
    k80 = gpu_roots.hardware(tmp_path / "k80", gpu_roots.HASWELL, listing=gpu_roots.K80_LIST)
    assert k80.gpus and k80.gpus[0].compute_capability == "3.7"
    k80_int8 = plan(k80, knowledge=KNOWLEDGE).int8
    assert k80_int8 is not None and not k80_int8.eligible and not k80_int8.routes


def test_gpu_of_unknown_capability_is_not_vouched_for() -> None:
    hw = detect(HOSTS / "epyc7451-p4d-8xa100-gpu")
    assert hw.gpus and all(g.compute_capability is None for g in hw.gpus)
    found = plan(hw, knowledge=KNOWLEDGE).int8
    assert found is not None and not found.eligible
    assert "compute capability unknown for GPU 0,1,2,3,4,5,6,7" in found.reason
    assert "no GPU with DP4A" not in found.reason


def _pascal_and_volta(tf_version: str | None, cuda: bool = True) -> Hardware:
    gpus = [
        Gpu(index=0, name="Tesla P4", compute_capability="6.1"),
        Gpu(index=1, name="Tesla V100", compute_capability="7.0"),
        Gpu(index=2, name="Tesla P100", compute_capability="6.0"),
    ]
    tf = tf_info(tf_version, cuda=cuda) if tf_version else None
    return make_hardware(cores_per_socket=8, gpus=gpus, tensorflow=tf)


def test_dp4a_from_61_and_tensorrt_only_through_tf_217() -> None:
    routes = _routes(_pascal_and_volta("2.17.1"))
    gpu = [r for r in routes if r[0].startswith("gpu")]
    assert ("cpu", "AVX512-VNNI", "oneDNN int8 kernels", True) in routes  # the Zen 4 host CPU
    # P4 (6.1) and V100 (7.0) have DP4A but no int8 tensor cores; P100 (6.0) has neither.
    assert gpu == [("gpu 0,1", "DP4A", "TF-TRT INT8", True)]
    newer = plan(_pascal_and_volta("2.18.0"), knowledge=KNOWLEDGE).int8
    assert newer is not None
    (trt,) = [r for r in newer.routes if r.device.startswith("gpu")]
    assert not trt.usable and "no longer carries it (last: 2.17)" in trt.note
    # A CPU-only TensorFlow uses no GPU, so no GPU route is offered.
    cpu_build = plan(_pascal_and_volta("2.17.1", cuda=False), knowledge=KNOWLEDGE).int8
    assert cpu_build is not None
    assert [r.device for r in cpu_build.routes] == ["cpu", "cpu"]


def test_plan_json_and_explain_carry_int8(cli) -> None:  # type: ignore[no-untyped-def]
    host = str(HOSTS / "alamb-gcp-c3-xeon8481c-spr-vm")
    result = cli(["plan", "--root", host, "--json"])
    assert result.exit_status == 0, result.stderr
    int8 = json.loads(result.stdout)["int8"]
    assert int8["eligible"] is True
    assert {r["route"] for r in int8["routes"]} == {
        "oneDNN int8 kernels",
        "TFLite/LiteRT with XNNPACK",
    }
    assert all(r["source"] and r["how"] for r in int8["routes"])
    result = cli(["explain", "int8", "--root", host])
    assert result.exit_status == 0, result.stderr
    assert "AVX512-VNNI -> oneDNN int8 kernels (usable)" in result.stdout
    assert "TFLite" in result.stdout and "representative_dataset" in result.stdout


@pytest.mark.parametrize(
    ("host", "present", "absent"),
    [
        (
            "alamb-gcp-c3-xeon8481c-spr-vm",
            {"int8": "true", "int8-onednn": "true", "int8-xnnpack": "true"},
            {"int8-tensorrt"},
        ),
        ("spack-rhel7-haswell", {"tf-march": "haswell"}, {"int8", "mixed-bfloat16"}),
        (
            "archspec-amazon-graviton2",
            {"int8": "true", "int8-xnnpack": "true", "tf-march": "neoverse-n1"},
            {"int8-onednn"},
        ),
    ],
)
def test_nfd_labels_from_hardware_alone(
    host: str, present: dict[str, str], absent: set[str]
) -> None:
    hw = detect(HOSTS / host)
    assert hw.tensorflow is None  # a capture: what the DaemonSet's TensorFlow-less image sees
    found = nfd.labels(hw, plan(hw, knowledge=KNOWLEDGE))
    for name, value in present.items():
        assert found.get(name) == value, (name, found)
    assert not absent & set(found)
    assert found["onednn-recommended"] in ("true", "false")
    assert all(nfd.VALID_VALUE.match(value) for value in found.values())


def test_nfd_labels_gpu_precision_and_int8(tmp_path: Path) -> None:
    t4 = detect(gpu_roots.t4_under_cuda_11(tmp_path))
    found = nfd.labels(t4, plan(t4, knowledge=KNOWLEDGE))
    assert found["mixed-float16"] == "true"  # 7.5: float16 tensor cores, no bfloat16 ones
    assert "mixed-bfloat16" not in found
    assert found["int8-tensorrt"] == "true"


def test_tf_trt_follows_the_planned_tensorflow_not_only_an_installed_one(tmp_path: Path) -> None:
    """No TensorFlow installed: the plan is for the newest known (2.21), whose CUDA builds have
    no TensorRT since 2.18 (tf-build.md §1c), so TF-TRT is not usable; asked for 2.17 it is.
    `hwtune explain int8` says the same as the plan."""
    root = gpu_roots.root(tmp_path, gpu_roots.HASWELL, xml=gpu_roots.A100_MIG_XML)
    hw = detect(root)  # A100, compute capability 8.0; driver CUDA 12.2 runs TF 2.21's 12.5.1
    assert hw.tensorflow is None
    newest = _routes(hw)
    assert newest == [("gpu 0", "INT8 Tensor Cores", "TF-TRT INT8", False)]
    profile = plan(hw, knowledge=KNOWLEDGE)
    assert profile.int8 is not None
    assert "TensorFlow 2.21" in profile.int8.routes[0].note
    assert "no longer carries it (last: 2.17)" in profile.int8.routes[0].note
    assert "no route usable as planned" in profile.int8.reason
    assert _routes(hw, tf_version="2.17") == [("gpu 0", "INT8 Tensor Cores", "TF-TRT INT8", True)]
    shown = run_cli(["explain", "int8", "--root", str(root)])
    assert shown.exit_status == 0, shown.stderr
    assert "TF-TRT INT8 (not usable as planned)" in shown.stdout
    assert "no longer carries it (last: 2.17)" in shown.stdout
