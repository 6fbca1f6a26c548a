"""Planner rules on hand-built hardware: threads, instances, knobs, precision, XLA, GPUs."""

from __future__ import annotations

import os

import pytest

from hwtune.apply.render import env_map
from hwtune.errors import PlanError
from hwtune.models.hardware import CpuInfo, Hardware
from hwtune.models.overrides import Overrides
from hwtune.models.profile import Intent, Setting
from hwtune.planner import Knowledge, explain, load_knowledge, plan
from tests.plan_builders import (
    CASCADELAKE_FLAGS,
    GIB,
    make_gpus,
    make_hardware,
    p4d_hardware,
    tf_info,
)


@pytest.fixture(scope="module")
def knowledge() -> Knowledge:
    return load_knowledge(extra_dirs=())


def test_this_machine_shape_two_cores_stock_tf(knowledge: Knowledge) -> None:
    profile = plan(make_hardware(tensorflow=tf_info()), knowledge=knowledge)
    assert profile.threads.intra_op.value == 2
    assert profile.threads.inter_op.value == 2
    # The counts are stored once; rendering derives their variables.
    assert not {"TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"} & set(profile.env)
    assert env_map(profile)["TF_NUM_INTRAOP_THREADS"] == "2"
    assert env_map(profile)["TF_NUM_INTEROP_THREADS"] == "2"
    assert profile.env["TF_ENABLE_ONEDNN_OPTS"].value == "1"
    assert not {"OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", "KMP_SETTINGS"} & set(
        profile.env
    )
    left = {item.name: item.reason for item in profile.left_out}
    assert left["KMP_AFFINITY"].startswith(
        "left out: this TensorFlow runs oneDNN on its Eigen thread pool (no OpenMP linked), so "
        "KMP_* has no effect (TensorFlow issue #56697"
    )
    assert profile.distribution is None
    assert profile.data_format.value == "channels_last"
    assert profile.jit.level.value == "off" and "model kind unknown" in profile.jit.level.reason


@pytest.mark.parametrize(
    ("model", "level", "flags", "why"),
    [
        ("unknown", "off", None, "off is the safe side"),
        ("conv", "off", None, "runtime_conv2d.cc"),
        ("dense", "autoclustering", "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit", "fuses"),
    ],
)
def test_xla_on_a_cpu_follows_the_model_kind(
    knowledge: Knowledge, model: str, level: str, flags: str | None, why: str
) -> None:
    profile = plan(make_hardware(tensorflow=tf_info()), knowledge=knowledge, model=model)
    assert profile.intent.model == model
    assert profile.jit.level.value == level and why in profile.jit.level.reason
    assert profile.jit.level.source == "rule"
    env = profile.env.get("TF_XLA_FLAGS")
    assert (env.value if env else None) == flags
    left = {item.name for item in profile.left_out}
    assert ("TF_XLA_FLAGS" in left) == (flags is None)


def test_xla_leaves_a_one_thread_dense_instance_on_onednn(knowledge: Knowledge) -> None:
    """Two instances on a 2-core bf16 CPU: one intra-op thread each with oneDNN on (planned for
    bf16), where XLA made the MLP slower with oneDNN's AVX-512 kernels; on an AVX2 CPU oneDNN
    stays on too, and so does XLA (ahead with oneDNN's AVX2 kernels)."""
    zen4 = make_hardware(tensorflow=tf_info())
    for instance in (0, 1):
        split = plan(zen4, knowledge=knowledge, model="dense", instances=2, instance=instance)
        assert split.threads.intra_op.value == 1
        onednn = split.env["TF_ENABLE_ONEDNN_OPTS"]
        assert onednn.value == "1" and "bf16 kernels, one intra-op thread" in onednn.reason
        assert "planned with bf16" not in onednn.reason  # bf16 is eligible, not planned
        assert split.jit.level.value == "off" and "one intra-op thread" in split.jit.level.reason
        assert "TF_XLA_FLAGS" not in split.env
    auto = plan(zen4, knowledge=knowledge, model="dense", instances=2, precision="auto")
    assert auto.env["TF_ENABLE_ONEDNN_OPTS"].reason.startswith("planned with bf16")
    whole = plan(zen4, knowledge=knowledge, model="dense")
    assert whole.threads.intra_op.value == 2 and whole.jit.level.value == "autoclustering"
    older = make_hardware(tensorflow=tf_info(), flags=("avx", "avx2", "fma"))
    split = plan(older, knowledge=knowledge, model="dense", instances=2)
    onednn = split.env["TF_ENABLE_ONEDNN_OPTS"]
    assert onednn.value == "1" and "CPU without bf16" in onednn.reason
    assert split.jit.level.value == "autoclustering"
    skylake = make_hardware(tensorflow=tf_info(), flags=CASCADELAKE_FLAGS, microarch="cascadelake")
    split = plan(skylake, knowledge=knowledge, model="dense", instances=2)
    assert split.env["TF_ENABLE_ONEDNN_OPTS"].value == "1"
    assert split.jit.level.value == "off" and "AVX-512 kernels" in split.jit.level.reason
    conv = plan(zen4, knowledge=knowledge, model="conv", instances=2)
    assert conv.jit.level.value == "off" and "runtime_conv2d.cc" in conv.jit.level.reason


def test_xla_on_a_gpu_is_off_until_the_model_kind_is_known(knowledge: Knowledge) -> None:
    hw = p4d_hardware()
    unknown = plan(hw, knowledge=knowledge)
    assert unknown.jit.level.value == "off" and "flags.h" in unknown.jit.level.reason
    assert "TF_XLA_FLAGS" not in unknown.env
    for model, cited in (("dense", "34% to BERT"), ("conv", "SE-ResNeXt101")):
        mixed = plan(hw, knowledge=knowledge, model=model, precision="auto")
        assert mixed.precision.enabled == "mixed_bfloat16"
        assert mixed.jit.level.value == "autoclustering" and cited in mixed.jit.level.reason
        assert mixed.env["TF_XLA_FLAGS"].value == "--tf_xla_auto_jit=2"
        # Every cited GPU gain for XLA is with mixed precision (or does not say): float32 keeps
        # it off.
        fp32 = plan(hw, knowledge=knowledge, model=model)
        assert fp32.jit.level.value == "off" and "in float32" in fp32.jit.level.reason
        assert "TF_XLA_FLAGS" not in fp32.env


def test_user_jit_outranks_the_model_rule(knowledge: Knowledge) -> None:
    overrides = Overrides(jit="off", origins={"jit": "--set"})
    profile = plan(make_hardware(), knowledge=knowledge, model="dense", overrides=overrides)
    assert profile.jit.level.value == "off" and profile.jit.level.source == "user"


def test_unknown_model_kind_is_refused(knowledge: Knowledge) -> None:
    with pytest.raises(PlanError, match="model 'rnn'"):
        plan(make_hardware(), knowledge=knowledge, model="rnn")


def test_smt_siblings_are_not_intra_op_threads_but_feed_tf_data(knowledge: Knowledge) -> None:
    hw = make_hardware(sockets=1, cores_per_socket=8, smt=2)
    profile = plan(hw, knowledge=knowledge)
    assert profile.threads.intra_op.value == 8
    assert "SMT" in profile.threads.intra_op.reason
    assert profile.tf_data.private_threadpool_size.value == 16


def test_quota_caps_threads(knowledge: Knowledge) -> None:
    hw = make_hardware(cores_per_socket=16, quota=4.0)
    profile = plan(hw, knowledge=knowledge)
    assert profile.threads.intra_op.value == 4
    assert "quota" in profile.threads.intra_op.reason
    assert profile.tf_data.autotune_cpu_budget.value == 4


def test_cpuset_limits_the_slice(knowledge: Knowledge) -> None:
    hw = make_hardware(cores_per_socket=16, usable=[4, 5, 6])
    profile = plan(hw, knowledge=knowledge)
    assert profile.instance.cpus == (4, 5, 6)
    assert profile.threads.intra_op.value == 3


def test_two_sockets_throughput_and_latency(knowledge: Knowledge) -> None:
    hw = make_hardware(
        sockets=2, cores_per_socket=24, smt=2, flags=CASCADELAKE_FLAGS, microarch="cascadelake"
    )
    # Stock TensorFlow (its own pool): both pools sized from the physical cores.
    throughput = plan(hw, knowledge=knowledge)
    assert throughput.threads.inter_op.value == throughput.threads.intra_op.value == 48
    assert "MKL builds" in throughput.threads.inter_op.reason
    latency = plan(hw, knowledge=knowledge, mode="latency")
    assert latency.threads.inter_op.value == 1
    assert latency.threads.intra_op.value == 48


def test_an_openmp_build_runs_one_op_per_socket(knowledge: Knowledge) -> None:
    # Each op runs an OpenMP team over every intra-op thread: concurrent ops would
    # oversubscribe the cores, so inter-op follows the sockets (Intel's advice for MKL builds).
    omp = tf_info("2.15.0", runtime="openmp", openmp_library="libiomp5.so")
    two_sockets = make_hardware(
        sockets=2, cores_per_socket=24, smt=2, flags=CASCADELAKE_FLAGS, tensorflow=omp
    )
    inter = plan(two_sockets, knowledge=knowledge).threads.inter_op
    assert inter.value == 2 and "OpenMP build" in inter.reason
    one_socket = plan(make_hardware(tensorflow=omp), knowledge=knowledge).threads
    assert (one_socket.intra_op.value, one_socket.inter_op.value) == (2, 1)


def test_inter_op_follows_intra_op_under_a_quota(knowledge: Knowledge) -> None:
    # A 4-CPU quota on one 16-core socket: TF's own default would start 16 inter-op threads,
    # one per socket would run one op at a time.
    profile = plan(make_hardware(cores_per_socket=16, quota=4.0), knowledge=knowledge)
    assert profile.threads.intra_op.value == profile.threads.inter_op.value == 4


def test_a_users_intra_op_count_does_not_raise_inter_op_beyond_the_cores(
    knowledge: Knowledge,
) -> None:
    # 16 intra-op threads set by hand on 2 cores: inter-op following them would start 32
    # threads on 2 CPUs; a smaller count set by hand is followed.
    hw = make_hardware()
    big = plan(hw, knowledge=knowledge, overrides=Overrides(intra_op=16)).threads
    assert (big.intra_op.value, big.inter_op.value) == (16, 2)
    assert "capped at 2, the intra-op count the rules give this slice" in big.inter_op.reason
    small = plan(hw, knowledge=knowledge, overrides=Overrides(intra_op=1)).threads
    assert (small.intra_op.value, small.inter_op.value) == (1, 1)
    # Under a 1-CPU quota the rule's count is the budget, and the reason must not call it cores.
    quota = plan(make_hardware(quota=1.0), knowledge=knowledge, overrides=Overrides(intra_op=4))
    assert (quota.threads.intra_op.value, quota.threads.inter_op.value) == (4, 1)
    assert "capped at 1, the intra-op count the rules give" in quota.threads.inter_op.reason


def test_instances_follow_numa_nodes_and_never_share_a_core(knowledge: Knowledge) -> None:
    hw = make_hardware(sockets=2, cores_per_socket=8, smt=2, nodes_per_socket=2)
    profile = plan(hw, knowledge=knowledge, instances=4, instance=2)
    assert [s.numa_nodes for s in profile.instances] == [(0,), (1,), (2,), (3,)]
    assert profile.instance.numa_nodes == (2,)
    seen: set[int] = set()
    for piece in profile.instances:
        assert not seen & set(piece.cpus)
        seen |= set(piece.cpus)
    assert profile.threads.intra_op.value == 4
    assert profile.threads.inter_op.value == 4


def test_more_instances_than_cores_is_an_error(knowledge: Knowledge) -> None:
    with pytest.raises(PlanError, match=r"3 instances need 3 physical cores.*\(CPUs 0-1\)"):
        plan(make_hardware(), knowledge=knowledge, instances=3)
    # One CPU is named as one, and one whose number no list gave as the count assumed.
    with pytest.raises(PlanError) as one:
        plan(make_hardware(cores_per_socket=1), knowledge=knowledge, instances=2)
    assert one.value.message.endswith("but only 1 is usable (CPU 0)")
    unlisted = Hardware(cpu=CpuInfo(arch="x86_64", logical_cpus=1))
    with pytest.raises(PlanError) as assumed:
        plan(unlisted, knowledge=knowledge, instances=2)
    assert assumed.value.message.endswith("1 is usable (no CPU list known: 1 CPU assumed)")
    with pytest.raises(PlanError, match="instance 2 does not exist"):
        plan(make_hardware(), knowledge=knowledge, instances=2, instance=2)
    with pytest.raises(TypeError, match="mood"):
        plan(make_hardware(), knowledge=knowledge, mood="happy")


def test_hybrid_latency_uses_performance_cores(knowledge: Knowledge) -> None:
    hw = make_hardware(cores_per_socket=10, hybrid_efficiency_cores=4)
    assert plan(hw, knowledge=knowledge).threads.intra_op.value == 10
    latency = plan(hw, knowledge=knowledge, mode="latency")
    assert latency.threads.intra_op.value == 6
    assert "efficiency" in latency.threads.intra_op.reason


def test_openmp_build_gets_kmp_knobs(knowledge: Knowledge) -> None:
    tf = tf_info(
        "2.15.0", runtime="openmp", distribution="intel-tensorflow", openmp_library="libiomp5.so"
    )
    profile = plan(make_hardware(cores_per_socket=8, tensorflow=tf), knowledge=knowledge)
    assert "OMP_NUM_THREADS" not in profile.env and env_map(profile)["OMP_NUM_THREADS"] == "8"
    assert profile.threads.openmp == "intel-tensorflow 2.15.0 links libiomp5.so"
    assert profile.env["KMP_AFFINITY"].value == "granularity=fine,compact,1,0"
    assert profile.env["KMP_BLOCKTIME"].value == "1"
    assert profile.env["KMP_SETTINGS"].value == "1"
    assert not {i.name for i in profile.left_out} & {"KMP_AFFINITY", "OMP_NUM_THREADS"}


def test_gnu_openmp_gets_omp_binding_not_kmp(knowledge: Knowledge) -> None:
    tf = tf_info(runtime="openmp", openmp_library="libgomp.so.1")
    profile = plan(make_hardware(cores_per_socket=4, tensorflow=tf), knowledge=knowledge)
    assert profile.env["OMP_PROC_BIND"].value == "close"
    assert "KMP_AFFINITY" not in profile.env
    assert "GNU OpenMP ignores KMP_*" in explain(profile, "KMP_BLOCKTIME")


def test_an_openmp_runtime_not_known_gets_only_the_standard_binding(knowledge: Knowledge) -> None:
    """Binaries that could not be read leave the OpenMP runtime unknown (tensorflow-cpu-aws
    2.12 links GNU OpenMP, which ignores KMP_*): only what every runtime reads is set."""
    tf = tf_info(runtime="openmp", openmp_library=None)
    profile = plan(make_hardware(cores_per_socket=4, tensorflow=tf), knowledge=knowledge)
    assert profile.env["OMP_PROC_BIND"].value == "close"
    assert "every OpenMP runtime pins" in profile.env["OMP_PROC_BIND"].reason
    assert not {name for name in profile.env if name.startswith("KMP_")}
    assert "not known which: KMP_* work in Intel and LLVM OpenMP only" in explain(
        profile, "KMP_AFFINITY"
    )


def test_bf16_cpu_plans_onednn_on_and_auto_enables(knowledge: Knowledge) -> None:
    profile = plan(make_hardware(), knowledge=knowledge, precision="auto")
    assert profile.precision.eligible == ("mixed_bfloat16",)
    assert profile.precision.enabled == "mixed_bfloat16"
    assert profile.env["TF_ENABLE_ONEDNN_OPTS"].value == "1"
    eligible_only = plan(make_hardware(), knowledge=knowledge)
    assert eligible_only.precision.enabled is None


def test_user_onednn_off_disables_bf16(knowledge: Knowledge) -> None:
    overrides = Overrides(env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    profile = plan(make_hardware(), knowledge=knowledge, precision="auto", overrides=overrides)
    assert profile.env["TF_ENABLE_ONEDNN_OPTS"] == Setting("0", "set by the user", "user")
    assert profile.precision.eligible == ("mixed_bfloat16",)
    assert profile.precision.enabled is None and "40×" in profile.precision.reason


def test_no_bf16_without_the_flags(knowledge: Knowledge) -> None:
    profile = plan(
        make_hardware(flags=CASCADELAKE_FLAGS, microarch="cascadelake"),
        knowledge=knowledge,
        precision="auto",
    )
    assert profile.precision.eligible == ()
    assert profile.precision.enabled is None


def test_a_single_thread_keeps_onednn_on_x86_and_says_what_disagrees(
    knowledge: Knowledge,
) -> None:
    hw = make_hardware(cores_per_socket=1, flags=CASCADELAKE_FLAGS, microarch="cascadelake")
    onednn = plan(hw, knowledge=knowledge).env["TF_ENABLE_ONEDNN_OPTS"]
    assert onednn.value == "1" and "1.54-1.68×" in onednn.reason and "#56350" in onednn.reason


def test_gpu_node_plan(knowledge: Knowledge) -> None:
    profile = plan(p4d_hardware(), knowledge=knowledge, precision="auto")
    assert profile.distribution is not None
    assert profile.distribution.strategy.value == "MirroredStrategy"
    assert profile.distribution.cross_device_ops.value == "NcclAllReduce"
    assert profile.precision.eligible == ("mixed_float16", "mixed_bfloat16")
    assert profile.precision.enabled == "mixed_bfloat16"
    assert profile.jit.level.value == "off"
    assert profile.env["TF_GPU_THREAD_MODE"].value == "gpu_private"
    assert "CUDA_VISIBLE_DEVICES" not in profile.env
    assert profile.data_format.value == "channels_last"
    assert profile.allow_soft_placement is not None and profile.allow_soft_placement.value is True
    assert profile.threads.intra_op.value == 48 and profile.threads.inter_op.value == 48


def test_gpu_instances_get_local_cpus_and_their_own_gpus(knowledge: Knowledge) -> None:
    hw = p4d_hardware()
    for k in range(8):
        profile = plan(hw, knowledge=knowledge, instances=8, instance=k)
        assert profile.env["CUDA_VISIBLE_DEVICES"].value == str(k)
        node = 0 if k < 4 else 1
        local = set(hw.gpus[k].cpu_affinity)
        assert set(profile.instance.cpus) <= local, (k, profile.instance.cpus)
        assert profile.instance.numa_nodes == (node,)
        assert profile.distribution is not None
        assert profile.distribution.strategy.value == "OneDeviceStrategy"


def test_pcie_gpus_keep_nccl(knowledge: Knowledge) -> None:
    links = [
        ["X", "PIX", "SYS", "SYS"],
        ["PIX", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PIX"],
        ["SYS", "SYS", "PIX", "X"],
    ]
    gpus = make_gpus(4, cc="7.0", name="Tesla V100-PCIE-16GB", links=links)
    profile = plan(make_hardware(cores_per_socket=16, gpus=gpus), knowledge=knowledge)
    assert profile.distribution is not None
    assert profile.distribution.cross_device_ops.value == "NcclAllReduce"
    assert profile.precision.eligible == ("mixed_float16",)


def test_cpu_only_tensorflow_cannot_use_gpus(knowledge: Knowledge) -> None:
    hw = make_hardware(gpus=make_gpus(2), tensorflow=tf_info(cuda=False))
    profile = plan(hw, knowledge=knowledge)
    assert profile.distribution is None
    assert "built without CUDA" in explain(profile, "TF_GPU_THREAD_MODE")
    assert profile.precision.eligible == ("mixed_bfloat16",)  # the CPU does the math
    assert profile.bazel is not None
    assert any("HERMETIC_CUDA_COMPUTE_CAPABILITIES=compute_80" in o for o in profile.bazel.options)


def test_tf_data_ram_budget_is_half_the_cgroup_limit_per_instance(knowledge: Knowledge) -> None:
    hw = make_hardware(cores_per_socket=8, memory=64 * GIB, memory_limit=8 * GIB)
    assert plan(hw, knowledge=knowledge).tf_data.autotune_ram_budget.value == 4 * GIB
    two = plan(hw, knowledge=knowledge, instances=2)
    assert two.tf_data.autotune_ram_budget.value == 2 * GIB
    assert "cgroup" in two.tf_data.autotune_ram_budget.reason


def test_measured_outranks_rules_and_user_outranks_measured(knowledge: Knowledge) -> None:
    omp = tf_info(runtime="openmp", openmp_library="libiomp5.so")
    hw = make_hardware(cores_per_socket=8, smt=2, tensorflow=omp)
    measured = {
        "threads.intra_op": Setting(12, "measured: 1.31× over the rule's choice", "measured"),
        "env.KMP_BLOCKTIME": Setting("0", "measured: 1.05×", "measured"),
        "jit.level": Setting("autoclustering", "measured: 1.2× with XLA", "measured"),
    }
    profile = plan(hw, knowledge=knowledge, measured=measured)
    assert profile.threads.intra_op == Setting(
        12, "measured: 1.31× over the rule's choice", "measured"
    )
    assert env_map(profile)["TF_NUM_INTRAOP_THREADS"] == "12"
    assert profile.env["KMP_BLOCKTIME"] == Setting("0", "measured: 1.05×", "measured")
    assert env_map(profile)["OMP_NUM_THREADS"] == "12"  # follows the measured intra-op count
    eigen = plan(make_hardware(cores_per_socket=8), knowledge=knowledge, measured=measured)
    assert "KMP_BLOCKTIME" not in eigen.env  # a measurement does not resurrect a dead knob
    assert profile.env["TF_XLA_FLAGS"].value == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    user = plan(
        hw,
        knowledge=knowledge,
        measured=measured,
        overrides=Overrides(intra_op=3, origins={"intra_op": "HWTUNE_INTRA_OP"}),
    )
    assert user.threads.intra_op == Setting(3, "set by the user (HWTUNE_INTRA_OP)", "user")
    capped = plan(
        hw, knowledge=knowledge, measured={"threads.intra_op": Setting(64, "measured", "measured")}
    )
    assert capped.threads.intra_op.value == 16


def test_user_env_thread_variable_syncs_threads(knowledge: Knowledge) -> None:
    overrides = Overrides(env={"TF_NUM_INTRAOP_THREADS": "1", "MY_VAR": "x"})
    profile = plan(make_hardware(), knowledge=knowledge, overrides=overrides)
    assert profile.threads.intra_op.value == 1 and profile.threads.intra_op.source == "user"
    assert env_map(profile)["TF_NUM_INTRAOP_THREADS"] == "1"
    assert "TF_NUM_INTRAOP_THREADS" not in profile.env  # stored once, in threads
    assert profile.env["MY_VAR"] == Setting("x", "set by the user", "user")


def test_user_setting_a_left_out_knob_emits_it(knowledge: Knowledge) -> None:
    profile = plan(
        make_hardware(), knowledge=knowledge, overrides=Overrides(env={"KMP_AFFINITY": "none"})
    )
    assert profile.env["KMP_AFFINITY"].source == "user"
    assert "KMP_AFFINITY" not in {item.name for item in profile.left_out}


def test_overrides_intent_fields_and_library_kwargs(knowledge: Knowledge) -> None:
    hw = make_hardware(cores_per_socket=8)
    profile = plan(hw, Intent(mode="latency"), knowledge=knowledge)
    assert profile.intent.mode == "latency"
    profile = plan(
        hw, Intent(mode="latency"), overrides=Overrides(mode="throughput"), knowledge=knowledge
    )
    assert profile.intent.mode == "throughput"
    measured = {"instances": Setting(2, "measured: 1.4× throughput", "measured")}
    assert plan(hw, knowledge=knowledge, measured=measured).intent.instances == 2


def test_plan_is_pure_of_the_process_environment(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = make_hardware(cores_per_socket=4)
    before = plan(hw, knowledge=knowledge)
    monkeypatch.setenv("HWTUNE_MODE", "latency")
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")
    after = plan(hw, knowledge=knowledge)
    assert before == after
    assert os.environ["TF_NUM_INTRAOP_THREADS"] == "1"  # and plan() wrote nothing back


def test_fingerprint_tracks_hardware_not_free_memory(knowledge: Knowledge) -> None:
    import dataclasses

    from hwtune.models.hardware import Memory

    hw = make_hardware()
    same = dataclasses.replace(
        hw, memory=Memory(total_bytes=hw.memory.total_bytes, available_bytes=1)
    )
    other = make_hardware(cores_per_socket=4)
    assert plan(hw, knowledge=knowledge).fingerprint == plan(same, knowledge=knowledge).fingerprint
    assert (
        plan(hw, knowledge=knowledge).fingerprint != plan(other, knowledge=knowledge).fingerprint
    )


def test_explain_names(knowledge: Knowledge) -> None:
    profile = plan(make_hardware(tensorflow=tf_info()), knowledge=knowledge)
    assert explain(profile, "threads.intra_op").startswith("threads.intra_op = 2")
    assert explain(profile, "tf_num_intraop_threads").startswith("TF_NUM_INTRAOP_THREADS = 2")
    assert "XLA stays off" in explain(profile, "TF_XLA_FLAGS")
    assert explain(profile, "jit").startswith("jit.level = off")
    assert "mixed_bfloat16" in explain(profile, "precision")
    assert "clang 18.1.8" in explain(profile, "--copt=-march=znver4")
    assert "2.21" in explain(profile, "bazel.tf_version")
    with pytest.raises(PlanError) as err:
        explain(profile, "KMP_AFINITY")
    assert err.value.hint == "did you mean KMP_AFFINITY?"
    # Names that exist only in other plans, or are no setting, say so instead of a near miss.
    for name, why in (
        ("pinning", "several instances"),
        ("distribution.strategy", "only with GPUs"),
        ("HWTUNE_PROFILE", "not a setting"),
    ):
        with pytest.raises(PlanError) as err:
            explain(profile, name)
        assert err.value.hint is not None and why in err.value.hint, name


def test_profile_round_trips_through_json(knowledge: Knowledge) -> None:
    import json

    from hwtune.models.convert import dump, load
    from hwtune.models.profile import Profile

    for hw in (make_hardware(tensorflow=tf_info()), p4d_hardware()):
        profile = plan(hw, knowledge=knowledge, precision="auto")
        assert load(Profile, json.loads(json.dumps(dump(profile))), "profile.json") == profile


def test_hardware_without_limits_is_not_planned_as_one_cpu() -> None:
    """A hardware file without "limits" (or a limits probe that failed) leaves Limits() at its
    defaults: its effective_cpus of 1 was never measured, so it must not cap 16 CPUs to 1."""
    hw = Hardware(cpu=CpuInfo(arch="x86_64", logical_cpus=16, online_cpus=tuple(range(16))))
    profile = plan(hw)
    assert profile.threads.intra_op.value == 16
    assert "CFS" not in profile.threads.intra_op.reason
    assert profile.bazel is not None
    assert not any(o.startswith("--local_cpu_resources") for o in profile.bazel.options)


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_a_user_onednn_true_counts_as_on(value: str) -> None:
    """TensorFlow reads TF_ENABLE_ONEDNN_OPTS with ReadBoolFromEnvVar: "true" is on too."""
    profile = plan(
        make_hardware(cores_per_socket=4),
        precision="auto",
        overrides=Overrides(env={"TF_ENABLE_ONEDNN_OPTS": value}),
    )
    assert profile.precision.enabled == "mixed_bfloat16", profile.precision.reason


@pytest.mark.parametrize("library", ["libiomp5.so", "libgomp.so.1"])
def test_unpinned_instances_of_an_openmp_build_are_not_bound(library: str) -> None:
    """Copies left unpinned (as a tune result measured) each start with every CPU; a
    compact/close binding would put every copy's threads on the same first cores."""
    tf = tf_info("2.15.0", runtime="openmp", openmp_library=library)
    hw = make_hardware(cores_per_socket=2, tensorflow=tf)
    unpinned = {"instances.pinned": Setting(False, "measured: 1.03× unpinned", "measured")}
    two = plan(hw, instances=2, measured=unpinned)
    assert two.pinning is not None and two.pinning.value is False
    if "gomp" in library:
        assert two.env["OMP_PROC_BIND"].value == "false"
        assert "OMP_PLACES" not in two.env
    else:
        assert two.env["KMP_AFFINITY"].value == "disabled"
    # One copy, or copies pinned by the rule, keep the binding within their CPUs.
    for bound_plan in (plan(hw), plan(hw, instances=2)):
        bound = bound_plan.env["OMP_PROC_BIND" if "gomp" in library else "KMP_AFFINITY"].value
        assert bound in ("close", "granularity=fine,compact,1,0")
