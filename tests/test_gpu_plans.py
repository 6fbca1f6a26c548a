"""GPU plans on real captures: CUDA builds, all-reduce, XLA, layout, precision, drivers.

Issue 14, items 1, 2, 4-8 and 10-12. Every root is assembled from captures in tests/data
(tests/gpu_roots.py); the expectations are what TensorFlow's sources and NVIDIA's guides say,
cited in the plan's own reasons.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hwtune.models.profile import Profile
from hwtune.planner import plan
from hwtune.probes import detect
from tests.gpu_roots import (
    A100_MIG_XML,
    BLACKWELL_XML,
    EPYC,
    H100_TOPO,
    HASWELL,
    K80_LIST,
    L40S_TOPO,
    P4D_HOST,
    T4_HOST,
    hardware,
    t4_under_cuda_11,
)
from tests.test_plan_invariants import KNOWLEDGE

OFFICIAL_2_21 = "sm_60,sm_70,sm_80,sm_89,compute_90"


def options(profile: Profile) -> tuple[str, ...]:
    assert profile.bazel is not None
    return profile.bazel.options


def left(profile: Profile, name: str) -> str:
    found = [item.reason for item in profile.left_out if item.name == name]
    assert found, f"{name} is not left out"
    return found[0]


# -- 1. a GPU host gets a CUDA build ------------------------------------------------------


@pytest.mark.parametrize("topo", [None, H100_TOPO, L40S_TOPO], ids=["p4d", "p5-h100", "l40s"])
def test_gpu_host_with_unknown_capability_gets_the_official_cuda_build(
    tmp_path: Path, topo: Path | None
) -> None:
    hw = detect(P4D_HOST) if topo is None else hardware(tmp_path, EPYC, topo=topo)
    assert hw.gpus and all(gpu.compute_capability is None for gpu in hw.gpus)
    profile = plan(hw, knowledge=KNOWLEDGE)
    assert options(profile)[:2] == ("--config=cuda_clang", "--config=cuda_wheel")
    assert f"--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES={OFFICIAL_2_21}" in options(profile)
    assert "--repo_env=WHEEL_NAME=tensorflow" in options(profile)
    assert profile.bazel is not None and profile.bazel.configure_env["TF_NEED_CUDA"] == "1"
    assert any("official list" in reason for reason in profile.bazel.reasons)


def test_a_gpu_tensorflow_no_longer_supports_is_said_plainly(tmp_path: Path) -> None:
    hw = hardware(tmp_path, HASWELL, listing=K80_LIST)
    assert hw.gpus[0].compute_capability == "3.7"
    profile = plan(hw, knowledge=KNOWLEDGE)
    assert "--repo_env=WHEEL_NAME=tensorflow_cpu" in options(profile)
    assert "no GPU of this machine is supported by TensorFlow 2.21" in left(profile, "bazel.cuda")
    assert profile.distribution is None  # TensorFlow ignores the GPU, and so does the plan
    assert "Ignoring visible gpu device" in left(profile, "TF_GPU_THREAD_MODE")


# -- 2. TensorRT in TF 2.15-2.17's cuda_clang ---------------------------------------------


@pytest.mark.parametrize("version", ["2.15", "2.16", "2.17"])
def test_legacy_cuda_builds_switch_tensorrt_off_after_the_configs(version: str) -> None:
    # The p4d's A100s: the T4 capture's driver (CUDA 11.7) gets no CUDA build of 2.15+ at all.
    profile = plan(detect(P4D_HOST), knowledge=KNOWLEDGE, tf_version=version)
    opts = options(profile)
    assert opts.index("--repo_env=TF_NEED_TENSORRT=0") > opts.index("--config=cuda_clang")
    assert profile.bazel is not None
    rc = profile.bazel.bazelrc
    assert rc.index("build --repo_env=TF_NEED_TENSORRT=0") > rc.index("build --config=cuda_clang")
    assert "#62689" in rc


def test_hermetic_builds_have_no_tensorrt_line() -> None:
    profile = plan(detect(P4D_HOST), knowledge=KNOWLEDGE, tf_version="2.18")
    assert "--config=cuda_clang" in options(profile)
    assert not any("TENSORRT" in option for option in options(profile))


# -- 4. NCCL stays the all-reduce ----------------------------------------------------------


@pytest.mark.parametrize("topo", [L40S_TOPO, H100_TOPO], ids=["l40s-pcie", "h100-nvswitch"])
def test_nccl_is_planned_on_pcie_and_nvlink_alike(tmp_path: Path, topo: Path) -> None:
    profile = plan(hardware(tmp_path, EPYC, topo=topo), knowledge=KNOWLEDGE)
    assert profile.distribution is not None
    assert profile.distribution.strategy.value == "MirroredStrategy"
    assert profile.distribution.cross_device_ops.value == "NcclAllReduce"
    assert "cross_device_ops.py" in profile.distribution.cross_device_ops.reason


# -- 5. XLA on GPU follows evidence --------------------------------------------------------


def test_xla_on_a_gpu_stays_off_without_a_model_kind(tmp_path: Path) -> None:
    hw = detect(t4_under_cuda_11(tmp_path))
    unknown = plan(hw, knowledge=KNOWLEDGE)
    assert unknown.jit.level.value == "off"
    assert "TF_XLA_FLAGS" not in unknown.env
    assert "jit_compile=True" in unknown.jit.level.reason and "flags.h" in unknown.jit.level.reason
    for model, cited in (
        ("dense", "34% to BERT"),
        ("conv", "mixed precision + XLA trained SE-ResNeXt101"),
    ):
        profile = plan(hw, knowledge=KNOWLEDGE, model=model, precision="auto")
        assert profile.precision.enabled == "mixed_float16"  # CC 7.5
        assert profile.env["TF_XLA_FLAGS"].value == "--tf_xla_auto_jit=2"
        assert cited in profile.jit.level.reason


@pytest.mark.parametrize("model", ["conv", "dense"])
def test_xla_on_a_gpu_in_float32_stays_off(tmp_path: Path, model: str) -> None:
    """The SE-ResNeXt101 gain is mixed precision + XLA against mixed precision alone, and BERT's
    +34% came after mixed precision (the MLPerf ~7× does not say its precision): a float32 plan
    (the T4 with --precision eligible, the p4d's GPUs of unknown capability with --precision
    auto) is not told those figures, and keeps XLA off."""
    for hw, precision in (
        (detect(t4_under_cuda_11(tmp_path / "t4")), "eligible"),
        (detect(P4D_HOST), "auto"),
    ):
        profile = plan(hw, knowledge=KNOWLEDGE, model=model, precision=precision)
        assert profile.distribution is not None and profile.precision.enabled is None
        assert profile.jit.level.value == "off"
        assert "TF_XLA_FLAGS" not in profile.env
        reason = profile.jit.level.reason
        assert "in float32" in reason and "1.58" not in reason
        assert ("published only with XLA on" if model == "conv" else "after mixed precision") in (
            reason
        )


# -- 6 and 11. precision and layout --------------------------------------------------------


def test_auto_precision_and_layout_follow_the_compute_capability(tmp_path: Path) -> None:
    t4_hw = detect(t4_under_cuda_11(tmp_path))
    t4 = plan(t4_hw, knowledge=KNOWLEDGE, precision="auto")  # CC 7.5
    assert t4.precision.enabled == "mixed_float16"
    assert t4.data_format.value == "channels_last"
    a100 = plan(
        hardware(tmp_path, HASWELL, xml=A100_MIG_XML), knowledge=KNOWLEDGE, precision="auto"
    )
    assert a100.precision.enabled == "mixed_bfloat16"  # CC 8.0: no loss scaling needed
    assert "no loss scaling" in a100.precision.reason
    assert (
        "TF32" in a100.precision.reason and "left as TensorFlow sets it" in a100.precision.reason
    )
    assert a100.data_format.value == "channels_last"
    assert "generic_layout_optimizer.cc" in a100.data_format.reason
    fp32 = plan(t4_hw, knowledge=KNOWLEDGE)  # --precision eligible: float32 runs
    assert fp32.data_format.value == "channels_first"


def test_blackwell_gets_the_ptx_jit_note_and_what_a_build_needs(tmp_path: Path) -> None:
    hw = hardware(tmp_path, HASWELL, xml=BLACKWELL_XML)
    assert hw.gpus[0].compute_capability == "12.0"
    profile = plan(hw, knowledge=KNOWLEDGE)
    note = " ".join(profile.warnings)
    assert "compute_90 PTX is JIT-compiled by the driver when TensorFlow starts" in note
    assert "CUDA ≥ 12.8" in note
    assert "--repo_env=HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_90" in options(profile)
    assert profile.bazel is not None
    assert any("HERMETIC_CUDA_VERSION" in reason for reason in profile.bazel.reasons)
    # driver 590 (CUDA 13.1) is newer than TF 2.21's CUDA 12.5.1: no driver warning
    assert not any("driver" in w and "older" in w for w in profile.warnings)


# -- 7. --host_copt only for the build host ------------------------------------------------


def test_host_copt_is_left_out_when_planning_for_another_machine() -> None:
    hw = detect(T4_HOST)
    captured = plan(hw, knowledge=KNOWLEDGE)
    assert not any(option.startswith("--host_copt") for option in options(captured))
    assert captured.bazel is not None
    assert any("SIGILL" in reason for reason in captured.bazel.reasons)
    assert captured.bazel.configure_env["CC_OPT_FLAGS"] == "-Wno-sign-compare"
    here = plan(dataclasses.replace(hw, root="/"), knowledge=KNOWLEDGE)
    assert "--host_copt=-march=haswell" in options(here)


# -- 10. the driver's CUDA against TensorFlow's ---------------------------------------------


def test_an_old_driver_is_a_plan_warning_naming_both_versions() -> None:
    profile = plan(detect(T4_HOST), knowledge=KNOWLEDGE)  # driver 515.105.01, CUDA 11.7
    (warning,) = profile.warnings
    assert "515.105.01" in warning and "11.7" in warning and "12.5.1" in warning
    assert "525.60.13" in warning


def test_a_driver_too_old_for_the_cuda_major_gets_the_cpu_plan() -> None:
    """The T4 capture's driver (CUDA 11.7) cannot load TF 2.21's CUDA 12: TensorFlow finds no
    GPU, so nothing is planned for one (the plan used to run the T4 and warn at once)."""
    hw = detect(T4_HOST)
    profile = plan(hw, knowledge=KNOWLEDGE, model="conv", precision="auto")
    (warning,) = profile.warnings
    assert "TensorFlow cannot use the GPU" in warning
    assert profile.distribution is None and profile.allow_soft_placement is None
    assert profile.instance.gpus == ()
    assert "TF_GPU_THREAD_MODE" not in profile.env
    assert "515.105.01 supports CUDA 11.7" in left(profile, "TF_GPU_THREAD_MODE")
    assert profile.data_format.value == "channels_last" and "CPU" in profile.data_format.reason
    assert profile.precision.eligible == () and profile.precision.enabled is None
    assert profile.jit.level.value == "off" and "on a CPU" in profile.jit.level.reason
    assert profile.int8 is not None and not any(
        route.device.startswith("gpu") for route in profile.int8.routes
    )
    # The source build too: a CUDA build of TF 2.21 would not load on that driver either.
    assert not [o for o in options(profile) if "cuda" in o.lower()], options(profile)
    assert "so the build is CPU-only" in left(profile, "bazel.cuda")
    assert "515.105.01 supports CUDA 11.7" in left(profile, "bazel.cuda")


def test_a_driver_of_the_same_cuda_major_keeps_the_gpu(tmp_path: Path) -> None:
    """Minor version compatibility: the same T4 driver runs an installed TF 2.14 (CUDA 11.8),
    and the A100 capture's driver (CUDA 12.2) runs TF 2.21's CUDA 12.5.1; both warn only."""
    t4 = plan(detect(t4_under_cuda_11(tmp_path)), knowledge=KNOWLEDGE)
    assert t4.instance.gpus == (0,) and t4.distribution is not None
    assert "minor version compatibility" in " ".join(t4.warnings)
    a100 = plan(hardware(tmp_path, HASWELL, xml=A100_MIG_XML), knowledge=KNOWLEDGE)
    assert a100.instance.gpus and a100.distribution is not None
    assert "CUDA 12.2" in " ".join(a100.warnings)
    assert "--config=cuda_clang" in options(a100)


def test_an_old_driver_under_an_installed_tensorflow_is_a_detect_issue(tmp_path: Path) -> None:
    from hwtune.probes.issues import IssueLog
    from hwtune.probes.tensorflow import save_tf_snapshot
    from tests.gpu_roots import root
    from tests.test_probe_tensorflow import CUDA_BUILD_INFO, make_site

    dest = root(tmp_path, HASWELL, xml=T4_HOST / "nvidia-smi-q.xml")
    site = make_site(tmp_path / "site", dist="tensorflow", build_info=CUDA_BUILD_INFO)
    save_tf_snapshot(dest, IssueLog(), search_path=[str(site)])
    hw = detect(dest)
    assert hw.tensorflow is not None and hw.tensorflow.cuda_version == "12.5.1"
    found = [i.reason for i in hw.issues if i.probe == "gpu" and "driver" in i.reason]
    assert found and "11.7" in found[0] and "12.5.1" in found[0]


# -- 12. knowledge fixes --------------------------------------------------------------------


def test_pantherlake_and_tf_2_17_compiler_facts_cite_their_sources() -> None:
    pantherlake = KNOWLEDGE.compiler_by_name["pantherlake"]
    assert pantherlake.clang_min == "18" and "Clang 18 release notes" in pantherlake.source
    tf217 = KNOWLEDGE.tf_by_version["2.17"]
    assert tf217.clang == "17.0.6"
    assert "#78613" in tf217.notes and "9122d7a" in tf217.notes


def test_a_tensorflow_newer_than_the_knowledge_keeps_the_newest_minimum() -> None:
    """TensorFlow has only ever raised its minimum compute capability (5.0 up to 2.16, 6.0
    from 2.17): a K80 under an unknown 2.99 is ignored as under 2.21, not planned for."""
    from tests.plan_builders import make_gpus, make_hardware, tf_info

    hw = make_hardware(
        gpus=make_gpus(1, cc="3.7", name="Tesla K80"), tensorflow=tf_info("2.99.0", cuda=True)
    )
    profile = plan(hw, knowledge=KNOWLEDGE)
    assert profile.distribution is None and "TF_GPU_THREAD_MODE" not in profile.env
    reason = {item.name: item.reason for item in profile.left_out}["CUDA_VISIBLE_DEVICES"]
    assert f"2.99.0 (as {KNOWLEDGE.newest_tf.key})" in reason


# -- latency mode with GPUs ------------------------------------------------------------------


def test_latency_mode_on_gpus_keeps_the_throughput_inter_op_rule() -> None:
    """One inter-op thread is Intel's rule for CPU inference (each op on every intra-op
    thread); the p4d's 8 A100s under MirroredStrategy are not told it. Without a usable GPU
    (the T4 capture's driver is too old for TF 2.21) latency mode keeps one thread."""
    gpus = plan(detect(P4D_HOST), knowledge=KNOWLEDGE, mode="latency")
    assert gpus.distribution is not None
    assert gpus.distribution.strategy.value == "MirroredStrategy"
    throughput = plan(detect(P4D_HOST), knowledge=KNOWLEDGE)
    inter = gpus.threads.inter_op
    assert inter.value == throughput.threads.inter_op.value != 1
    assert "latency mode on a slice with 8 GPUs" in inter.reason
    assert "real-time-inference" not in inter.reason
    cpu = plan(detect(T4_HOST), knowledge=KNOWLEDGE, mode="latency")
    assert cpu.distribution is None and cpu.threads.inter_op.value == 1
    assert "real-time-inference" in cpu.threads.inter_op.reason


def test_unknown_compute_capability_names_every_gpu() -> None:
    """The p4d capture's 8 A100s have no compute capability (topo -m only): all are named,
    and a slice names its own."""
    hw = detect(P4D_HOST)
    whole = plan(hw, knowledge=KNOWLEDGE)
    assert "compute capability unknown for GPUs 0-7:" in whole.precision.reason
    half = plan(hw, knowledge=KNOWLEDGE, instances=2, instance=1)
    assert "compute capability unknown for GPUs 4-7:" in half.precision.reason


def test_an_instance_whose_gpus_are_not_all_sized_has_no_device_memory(tmp_path: Path) -> None:
    """The RTX PRO Blackwell of one capture (97,887 MiB) beside a GPU of the L40S node's
    `topo -m`, which gives no memory: one instance on both was said to have 97,887 MiB per
    device, the least of the one size known, though the other GPU may be smaller."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pro = hardware(tmp_path / "a", HASWELL, xml=BLACKWELL_XML)
    (unsized, *_) = hardware(tmp_path / "b", HASWELL, topo=L40S_TOPO).gpus
    assert pro.gpus[0].memory_bytes and unsized.memory_bytes is None
    both = dataclasses.replace(pro, gpus=(pro.gpus[0], dataclasses.replace(unsized, index=1)))
    profile = plan(both, knowledge=KNOWLEDGE)
    assert profile.instance is not None and profile.instance.gpus == (0, 1)
    assert profile.instance.gpu_memory_bytes is None
    assert profile.gpu_memory is not None and profile.gpu_memory.value is None
    assert "GPU memory unknown" in profile.gpu_memory.reason, profile.gpu_memory.reason
    alone = plan(pro, knowledge=KNOWLEDGE)
    assert alone.instance is not None
    assert alone.instance.gpu_memory_bytes == pro.gpus[0].memory_bytes
