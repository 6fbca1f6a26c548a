"""Invariants of every plan (issue 3, "Correct"), on generated hardware (hypothesis).

`check_invariants` is also run by the golden tests on every captured host.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwtune.errors import PlanError
from hwtune.models.hardware import Hardware
from hwtune.models.profile import Intent, Profile
from hwtune.planner import Knowledge, load_knowledge, plan
from hwtune.planner.accel import gpus_tensorflow_can_use
from hwtune.planner.cpu_target import ADD_BACK
from hwtune.planner.instances import physical_cores, split, usable_cpus
from hwtune.planner.knowledge import version_tuple
from tests.plan_builders import ZEN4_FLAGS, make_gpus, make_hardware, tf_info

KNOWLEDGE = load_knowledge(extra_dirs=())
OPENMP_KNOBS = ("OMP_", "KMP_")


def check_invariants(hw: Hardware, profile: Profile, knowledge: Knowledge = KNOWLEDGE) -> None:
    intent = profile.intent
    planned = knowledge.tf_by_version.get(profile.bazel.tf_version) if profile.bazel else None
    gpus, _ = gpus_tensorflow_can_use(hw, planned, knowledge)
    slices = split(hw, intent.instances, gpus)
    mine = slices[intent.instance]
    # Intra-op threads never exceed the effective CPUs of the instance (rules and measurements;
    # only the user may ask for more).
    if profile.threads.intra_op.source != "user":
        assert 1 <= int(profile.threads.intra_op.value or 0) <= mine.budget
    if profile.threads.inter_op.source == "rule":
        assert (
            1
            <= int(profile.threads.inter_op.value or 0)
            <= int(profile.threads.intra_op.value or 0)
        )
    # Instances never share a core, and stay inside the usable CPUs.
    core_of = {
        cpu: i for i, core in enumerate(physical_cores(hw, usable_cpus(hw))) for cpu in core.cpus
    }
    owner: dict[int, int] = {}
    for piece in profile.instances:
        assert set(piece.cpus) <= set(usable_cpus(hw))
        for cpu in piece.cpus:
            assert owner.setdefault(core_of[cpu], piece.index) == piece.index, (
                "two instances share a core"
            )
    assert profile.instance == profile.instances[intent.instance]
    # No OpenMP knob on an Eigen-runtime TensorFlow.
    if hw.tensorflow is None or hw.tensorflow.threading_runtime == "eigen":
        user = {name for name, s in profile.env.items() if s.source == "user"}
        assert not [n for n in profile.env if n.startswith(OPENMP_KNOBS) and n not in user]
    # bf16 eligibility iff the hardware (of the device doing the math) has it.
    if mine.gpus:
        ccs = [version_tuple(g.compute_capability or "") for g in mine.gpus]
        has_bf16 = all(cc and cc >= (8, 0) for cc in ccs)
    else:
        has_bf16 = bool({"avx512_bf16", "amx_bf16"} & set(hw.cpu.flags))
    assert ("mixed_bfloat16" in profile.precision.eligible) == has_bf16
    if profile.precision.enabled == "mixed_bfloat16" and not mine.gpus:
        assert profile.env["TF_ENABLE_ONEDNN_OPTS"].value == "1"
    assert (
        profile.precision.enabled is None
        or profile.precision.enabled in profile.precision.eligible
    )
    if intent.precision != "auto":
        assert profile.precision.enabled is None
    # Distribution only with GPUs; CUDA_VISIBLE_DEVICES only to split them.
    assert (profile.distribution is None) == (not mine.gpus)
    assert ("CUDA_VISIBLE_DEVICES" in profile.env) == (bool(mine.gpus) and intent.instances > 1)
    if profile.bazel is not None:
        tf = knowledge.tf_by_version[profile.bazel.tf_version]
        for option in profile.bazel.options:
            # Every --config exists in that TensorFlow version.
            if option.startswith("--config="):
                assert option.removeprefix("--config=") in tf.configs
            # Every -march/-mcpu is accepted by that version's compiler, and by this CPU.
            added = {flag: (feature, clang) for feature, (flag, clang) in ADD_BACK.items()}
            if option.removeprefix("--copt=") in added:
                # An extension a fallback -march left out: the CPU shows it, clang knows it.
                feature, clang_min = added[option.removeprefix("--copt=")]
                assert feature in hw.cpu.flags
                assert version_tuple(clang_min) <= version_tuple(tf.clang)
            elif option.startswith("--copt=-m"):
                flag = option.removeprefix("--copt=")
                tune = flag.startswith("-mtune=")  # tuning emits nothing: no flags to check
                name = flag.partition("=")[2]
                target = next(
                    t
                    for t in knowledge.compilers
                    if (t.flag.partition("=")[2] == name if tune else t.flag == flag)
                )
                assert version_tuple(target.clang_min) <= version_tuple(tf.clang)
                assert tune or set(target.requires) <= set(hw.cpu.flags)
                assert target.arch == hw.cpu.arch
    # Every setting says why.
    for name, setting in profile.env.items():
        assert setting.reason, name
    for item in profile.left_out:
        assert item.reason and item.name not in profile.env


FLAG_POOL = sorted(
    set(ZEN4_FLAGS) | {"amx_bf16", "amx_tile", "avx512_fp16", "avx_vnni", "sve", "bf16", "i8mm"}
)
X86_TARGETS = sorted(t.key for t in KNOWLEDGE.compilers if t.arch == "x86_64")
ARM_TARGETS = sorted(t.key for t in KNOWLEDGE.compilers if t.arch == "aarch64")
LINK_WORDS = ("NV12", "NV4", "PIX", "PXB", "NODE", "SYS")


@st.composite
def hardware_and_intent(draw: Any) -> tuple[Hardware, Intent]:
    sockets = draw(st.integers(1, 4))
    cores = draw(st.integers(1, 12))
    smt = draw(st.sampled_from((1, 2, 4)))
    nodes = draw(st.integers(1, 2))
    arch = draw(st.sampled_from(("x86_64", "x86_64", "aarch64")))
    online = sockets * cores * smt
    usable = None
    if draw(st.booleans()):
        usable = draw(
            st.lists(st.integers(0, online - 1), min_size=1, max_size=online, unique=True)
        )
    quota = draw(st.none() | st.floats(0.5, 64.0))
    flags = draw(st.lists(st.sampled_from(FLAG_POOL), unique=True))
    microarch = draw(
        st.none()
        | st.sampled_from(X86_TARGETS if arch == "x86_64" else ARM_TARGETS)
        | st.just("zz-unknown")
    )
    gpu_count = draw(st.integers(0, 8) if draw(st.booleans()) else st.just(0))
    gpus: tuple[Any, ...] = ()
    if gpu_count:
        words = [
            [draw(st.sampled_from(LINK_WORDS)) for _ in range(gpu_count)] for _ in range(gpu_count)
        ]
        links = [
            [words[min(i, j)][max(i, j)] if i != j else "X" for j in range(gpu_count)]
            for i in range(gpu_count)
        ]
        numa = [draw(st.none() | st.integers(0, sockets * nodes - 1)) for _ in range(gpu_count)]
        cc = draw(st.sampled_from(("6.0", "7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "")))
        gpus = make_gpus(gpu_count, cc=cc, links=links, numa_nodes=numa)
        if cc and draw(st.booleans()):  # a mixed box: one GPU of another generation
            mixed = make_gpus(gpu_count, cc="7.0", links=links, numa_nodes=numa)
            gpus = (*gpus[:-1], mixed[-1])
    tensorflow = None
    if draw(st.booleans()):
        version = draw(st.sampled_from([*sorted(KNOWLEDGE.tf_by_version), "2.99"])) + ".0"
        runtime = draw(st.sampled_from(("eigen", "openmp")))
        tensorflow = tf_info(
            version,
            runtime=runtime,
            cuda=draw(st.booleans()),
            openmp_library=draw(st.sampled_from(("libiomp5.so", "libgomp.so.1"))),
        )
    hw = make_hardware(
        sockets=sockets,
        cores_per_socket=cores,
        smt=smt,
        nodes_per_socket=nodes,
        usable=usable,
        quota=quota,
        flags=flags,
        microarch=microarch,
        arch=arch,
        gpus=gpus,
        tensorflow=tensorflow,
        hybrid_efficiency_cores=draw(st.integers(0, cores - 1)) if draw(st.booleans()) else 0,
    )
    physical = len(physical_cores(hw, usable_cpus(hw)))
    instances = draw(st.integers(1, physical))
    intent = Intent(
        mode=draw(st.sampled_from(("throughput", "latency"))),
        instances=instances,
        instance=draw(st.integers(0, instances - 1)),
        precision=draw(st.sampled_from(("off", "eligible", "auto"))),
        tf_version=draw(st.none() | st.sampled_from(sorted(KNOWLEDGE.tf_by_version))),
    )
    return hw, intent


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hardware_and_intent())
def test_invariants_on_generated_hardware(case: tuple[Hardware, Intent]) -> None:
    hw, intent = case
    check_invariants(hw, plan(hw, intent, knowledge=KNOWLEDGE))


@settings(max_examples=40, deadline=None)
@given(hardware_and_intent(), st.data())
def test_too_many_instances_is_a_plan_error_never_a_crash(
    case: tuple[Hardware, Intent], data: Any
) -> None:
    hw, _ = case
    physical = len(physical_cores(hw, usable_cpus(hw)))
    extra = data.draw(st.integers(physical + 1, physical + 8))
    with pytest.raises(PlanError):
        plan(hw, instances=extra, knowledge=KNOWLEDGE)


def test_plan_of_empty_hardware_still_plans() -> None:
    profile = plan(Hardware(), knowledge=KNOWLEDGE)
    check_invariants(Hardware(), profile)
    assert profile.threads.intra_op.value == 1
