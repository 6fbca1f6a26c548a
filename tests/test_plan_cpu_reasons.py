"""Reasons of CPU plans read true on the captured machine they were planned for.

Each test plans a real capture (tests/data/hosts, or ../shared/fixtures/hw laid out as a root)
and checks a reason against what the capture shows.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hwtune.commands.plan import table_rows
from hwtune.doctor.analysis import _signals
from hwtune.models.convert import dump
from hwtune.models.profile import Profile
from hwtune.planner import plan
from hwtune.planner.explain import explain
from hwtune.probes import detect
from tests.conftest import DATA, run_cli
from tests.plan_builders import make_hardware
from tests.test_plan_invariants import KNOWLEDGE

HOSTS = DATA / "hosts"


def planned(root: Path, **intent: object) -> Profile:
    return plan(detect(root, gpus=True, tensorflow=True), knowledge=KNOWLEDGE, **intent)


def cpuinfo_root(capture: Path, root: Path) -> Path:
    (root / "proc").mkdir(parents=True)
    shutil.copyfile(capture, root / "proc" / "cpuinfo")
    return root


def test_dense_xla_reason_names_the_keras_argument() -> None:
    profile = planned(HOSTS / "spack-rhel7-haswell", model="dense")
    assert "jit_compile=True" in profile.jit.level.reason
    assert "report." not in profile.jit.level.reason


def test_doctor_xla_fix_names_the_keras_argument() -> None:
    (xla,) = [f for f in _signals({"xla": "not seen"}) if f.id == "xla-not-used"]
    assert "jit_compile=True" in xla.fix
    assert "report." not in xla.fix


def all_text(profile: Profile) -> str:
    """Every string of the profile (reasons, left-out notes, warnings), one per line."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(dump(profile))
    return "\n".join(found)


def test_measured_reasons_cite_no_file_users_lack(shared_hw: Path, tmp_path: Path) -> None:
    # bench/ is in hwtune's source tree, not in the installed package: a reason states the
    # measurement (what, where, the figure) instead of naming its results file.
    profiles = [
        # pinning: several instances
        planned(HOSTS / "spack-rhel7-haswell", instances=2),
        # oneDNN with one intra-op thread on an x86 CPU without bf16
        planned(HOSTS / "spack-rhel7-haswell", instances=24),
        # a dense model, one thread, oneDNN's AVX-512 kernels: XLA off
        planned(
            cpuinfo_root(shared_hw / "archspec-centos7-cascadelake.cpuinfo", tmp_path / "c"),
            model="dense",
        ),
    ]
    for profile in profiles:
        text = all_text(profile)
        assert "bench/" not in text
        assert "hwtune's repository" not in text
        assert "paired_arms" not in text
    assert "1.27x [1.23-1.31]" in all_text(profiles[0])  # the figures stay
    assert "2-vCPU EPYC Zen 4 VM" in all_text(profiles[1])
    assert profiles[2].jit.level.value == "off"
    assert "1-CPU quota" in profiles[2].jit.level.reason


def test_no_int8_route_reason_is_true_on_cpus_with_other_int8_instructions(
    shared_hw: Path, tmp_path: Path
) -> None:
    # A64FX has SVE's SDOT/UDOT, POWER9 vmsumubm, POWER10 MMA xvi8ger4: int8 dot products
    # exist there, just none that TensorFlow's int8 routes use.
    for name in (
        "archspec-rocky8-a64fx",
        "archspec-rhel8-power9",
        "archspec-unknown-power10",
    ):
        profile = planned(cpuinfo_root(shared_hw / f"{name}.cpuinfo", tmp_path / name))
        assert profile.int8 is not None and not profile.int8.eligible
        reason = profile.int8.reason
        assert "no int8 dot-product instructions" not in reason, name
        assert "no int8 instruction that TensorFlow's int8 routes use" in reason, name
        assert "three x86 instructions" not in reason, name
    haswell = planned(HOSTS / "spack-rhel7-haswell")
    assert haswell.int8 is not None
    assert "three x86 instructions per VNNI one" in haswell.int8.reason


def test_cpu_bf16_reason_on_power10_is_not_x86_framed(shared_hw: Path, tmp_path: Path) -> None:
    # POWER10's MMA has bf16 outer products (xvbf16ger2): "neither avx512_bf16 nor amx_bf16"
    # is x86's vocabulary, and says nothing true about this CPU.
    root = cpuinfo_root(shared_hw / "archspec-unknown-power10.cpuinfo", tmp_path / "p10")
    reason = planned(root).precision.reason
    assert "neither avx512_bf16" not in reason
    assert "ppc64le" in reason and "x86" in reason
    x86 = planned(HOSTS / "spack-rhel7-haswell").precision.reason
    assert "neither avx512_bf16 nor amx_bf16" in x86


def test_ppc64le_reasons_do_not_claim_onednn() -> None:
    # TensorFlow builds oneDNN only for x86-64 and aarch64: the OpenMP knobs' and data
    # format's reasons must not say it runs here.
    profile = planned(HOSTS / "cpufeatures-ppc64le-power9-w8-fragment")
    assert profile.env["TF_ENABLE_ONEDNN_OPTS"].value == "0"
    omp = {item.name: item.reason for item in profile.left_out}["OMP_NUM_THREADS"]
    assert "oneDNN on its Eigen" not in omp
    assert "no oneDNN on ppc64le" in omp
    assert profile.data_format.value == "channels_last"
    assert "oneDNN" not in profile.data_format.reason
    x86 = planned(HOSTS / "spack-rhel7-haswell")
    assert "oneDNN kernels" in x86.data_format.reason
    x86_omp = {item.name: item.reason for item in x86.left_out}["OMP_NUM_THREADS"]
    assert "runs oneDNN on its Eigen thread pool" in x86_omp


def test_tf_data_pool_mentions_smt_siblings_only_where_there_are_some() -> None:
    for name in ("spack-rhel7-haswell", "haswell-tesla-t4-gpu", "archspec-amazon-graviton2"):
        reason = planned(HOSTS / name).tf_data.private_threadpool_size.reason
        assert "SMT" not in reason, name
    # EPYC 7451: two threads per core in the capture's core table
    epyc = planned(HOSTS / "utillinux-x86_64-epyc_7451").tf_data.private_threadpool_size
    assert "SMT siblings included" in epyc.reason


def test_an_assumed_cpu_list_is_not_stated_as_detected(shared_hw: Path, tmp_path: Path) -> None:
    # One record, "processor : 2", and no online/affinity list: detect says "no CPU list known
    # (assumed 1)"; the plan's reasons must say the same, not "CPUs 0" as if detected.
    root = cpuinfo_root(shared_hw / "archspec-unknown-sapphirerapids.cpuinfo", tmp_path / "spr")
    profile = planned(root)
    intra = profile.threads.intra_op
    assert intra.value == 1
    assert "CPUs 0" not in intra.reason
    assert "no CPU list known: 1 CPU assumed" in intra.reason
    assert "per-CPU core ids unknown: 1 CPUs" not in intra.reason
    pool = profile.tf_data.private_threadpool_size.reason
    assert "1 CPU assumed" in pool and "SMT siblings" not in pool
    assert "1 CPU assumed" in profile.tf_data.autotune_cpu_budget.reason
    # The plan's instance row and `explain instance` read the profile alone: it says so too.
    assert profile.instance.cpus_assumed and profile.instances[0].cpus_assumed
    (row,) = [reason for name, _, reason in table_rows(profile) if name == "instance"]
    assert row == "no CPU list known: 1 CPU assumed; mode throughput"
    assert explain(profile, "instance").startswith("instance 0 of 1: no CPU list known: 1 CPU")
    # A detected one-CPU slice is named as such: "CPU 1", not "CPUs 1".
    halves = plan(make_hardware(cores_per_socket=2), knowledge=KNOWLEDGE, instances=2, instance=1)
    assert not halves.instance.cpus_assumed
    (row,) = [reason for name, _, reason in table_rows(halves) if name == "instance"]
    assert row == "CPU 1; mode throughput"


def test_counts_of_one_read_singular() -> None:
    # Two instances on two cores give one-CPU slices, and a 1.5-CPU quota on four CPUs one
    # effective CPU: the reasons say "1 usable CPU", not "1 usable CPUs".
    halves = plan(make_hardware(cores_per_socket=2), knowledge=KNOWLEDGE, instances=2)
    pool = halves.tf_data.private_threadpool_size.reason
    assert pool.startswith("the slice's 1 usable CPU: "), pool
    assert halves.tf_data.interleave_cycle_length.reason.startswith("the slice's 1 effective CPU;")
    quota = plan(make_hardware(cores_per_socket=4, quota=1.5), knowledge=KNOWLEDGE)
    budget = quota.tf_data.autotune_cpu_budget.reason
    assert budget.startswith("the slice's 1 effective CPU (cgroup CPU quota 1.5 CPUs)"), budget
    for text in (all_text(halves), all_text(quota)):
        assert not re.search(r"\b1 (usable |effective |online )?CPUs\b", text), text


def lscpu_summary_root(capture: Path, root: Path) -> Path:
    """The capture's lscpu summary alone: its `lscpu -p` tables (per-CPU core ids) cut off."""
    root.mkdir(parents=True)
    text = capture.read_text()
    cut = text.find("# The following is the parsable format")
    (root / "lscpu.txt").write_text(text if cut < 0 else text[:cut])
    return root


def test_c3_instances_do_not_share_smt_siblings() -> None:
    # The C3 capture has no per-CPU core ids; its NUMA lists (0-21,88-109 ...) show x86's
    # numbering, CPU n and n+88 on one core. Each instance holds both or neither.
    hw = detect(HOSTS / "alamb-gcp-c3-xeon8481c-spr-vm")
    profile = plan(hw, knowledge=KNOWLEDGE, instances=3)
    for slice_ in profile.instances:
        mine = set(slice_.cpus)
        assert all((n + 88 in mine) == (n in mine) for n in range(88)), slice_.cpus
    assert [len(s.cpus) for s in profile.instances] == [60, 58, 58]  # 30, 29, 29 of 88 cores
    assert profile.pinning is not None
    assert "29+ physical cores" in profile.pinning.reason
    assert "CPU n and n+88 taken as SMT siblings" in profile.pinning.reason
    assert profile.threads.intra_op.value == 30
    one = plan(hw, knowledge=KNOWLEDGE)
    assert one.threads.intra_op.value == 88  # unchanged: 176 CPUs at 2 threads per core


def test_sibling_pairing_matches_captured_core_ids(tmp_path: Path) -> None:
    # util-linux's EPYC 7451 capture has both the summary and the per-CPU table: pairing from
    # the summary's NUMA lists must give the table's cores.
    from hwtune.planner.instances import physical_cores, sibling_offset, usable_cpus

    capture = DATA / "hosts" / "utillinux-x86_64-epyc_7451"
    full = detect(capture)
    table = {core.cpus for core in physical_cores(full, usable_cpus(full))}
    assert all(len(cpus) == 2 for cpus in table)
    summary = detect(lscpu_summary_root(capture / "lscpu.txt", tmp_path / "epyc"))
    assert not any(lc.core is not None for lc in summary.cpu.topology)
    assert sibling_offset(summary) == 48
    inferred = physical_cores(summary, usable_cpus(summary))
    assert {core.cpus for core in inferred} == table
    assert all(core.inferred for core in inferred)


def test_pinning_without_core_ids_or_numbering_says_logical_cpus(tmp_path: Path) -> None:
    # Meteor Lake numbers a P-core's threads next to each other (1,2): with its table cut off,
    # one NUMA node shows no numbering, so no pairing is guessed and no core count claimed.
    capture = HOSTS / "utillinux-x86_64-meteor_lake" / "lscpu.txt"
    hw = detect(lscpu_summary_root(capture, tmp_path / "mtl"))
    profile = plan(hw, knowledge=KNOWLEDGE, instances=2)
    assert profile.pinning is not None
    assert "physical cores" not in profile.pinning.reason
    assert "11+ logical CPUs (per-CPU core ids unknown" in profile.pinning.reason


def test_bazel_plan_passes_use_pywrap_rules_from_tf_2_20() -> None:
    # TensorFlow's source-build guide: `bazel build //tensorflow/tools/pip_package:wheel
    # --repo_env=USE_PYWRAP_RULES=1 --repo_env=WHEEL_NAME=...` for 2.20 and 2.21, not before;
    # 2.21's own .bazelrc already sets `build --repo_env=USE_PYWRAP_RULES=True`, so hwtune's
    # line would change nothing there and is left out with the reason.
    host = HOSTS / "spack-rhel7-haswell"
    for version, expected in (("2.19", False), ("2.20", True), ("2.21", False)):
        bazel = planned(host, tf_version=version).bazel
        assert bazel is not None
        assert ("--repo_env=USE_PYWRAP_RULES=1" in bazel.options) is expected, version
        assert ("build --repo_env=USE_PYWRAP_RULES=1" in bazel.bazelrc) is expected, version
    bazel = planned(host, tf_version="2.21").bazel
    assert bazel is not None
    assert "already sets it for every build (build --repo_env=USE_PYWRAP_RULES=True)" in (
        bazel.bazelrc
    )


def test_c3_fallback_march_keeps_avx512_bf16() -> None:
    # The C3 guest shows avx512_bf16 but not AMX, so sapphirerapids falls back to
    # icelake-server, whose -march does not imply AVX512_BF16 (cooperlake's and
    # sapphirerapids' do): the plan adds it back rather than drop it silently.
    bazel = planned(HOSTS / "alamb-gcp-c3-xeon8481c-spr-vm").bazel
    assert bazel is not None
    assert "--copt=-march=icelake-server" in bazel.options
    assert "--copt=-mavx512bf16" in bazel.options
    assert "--copt=-mavx512fp16" not in bazel.options  # the guest does not show it
    assert "--copt=-mamx-tile" not in bazel.options
    # No fallback, nothing added: Haswell builds with -march=haswell alone.
    haswell = planned(HOSTS / "spack-rhel7-haswell").bazel
    assert haswell is not None
    assert not [o for o in haswell.options if o.startswith("--copt=-mavx")]


def test_meteor_lake_reasons_state_the_p_e_split() -> None:
    # util-linux's Meteor Lake: 6 P-cores (CPUs 0-11, two threads each), 10 E-cores (12-21).
    host = HOSTS / "utillinux-x86_64-meteor_lake"
    one = planned(host)
    assert one.threads.intra_op.value == 16  # the setting stays: every core, throughput
    assert "6 performance cores and 10 efficiency cores" in one.threads.intra_op.reason
    second = planned(host, instances=2, instance=1)
    assert second.threads.intra_op.value == 8
    assert "8 efficiency cores" in second.threads.intra_op.reason
    assert "performance cores" not in second.threads.intra_op.reason
    assert second.pinning is not None
    assert "instance 0 has 6 performance cores and 2 efficiency cores" in second.pinning.reason
    assert "instance 1 has 8 efficiency cores" in second.pinning.reason


def test_explain_takes_a_bazel_option_as_its_setting() -> None:
    # explain's help says SETTING may be "a bazel option", which looks like a flag to argparse.
    root = str(HOSTS / "cpufeatures-ppc64le-power9-w8-fragment")
    result = run_cli(["explain", "--copt=-mcpu=power9", "--root", root], {})
    assert result.exit_status == 0, result.stderr
    assert result.stdout.startswith("--copt=-mcpu=power9\n")
    assert run_cli(["explain", "--root", root, "--", "--copt=-mcpu=power9"], {}).exit_status == 0
    # Split in two words it cannot be told from flags: the usage error says how to pass it.
    split = run_cli(["explain", "--root", root, "--copt", "-mcpu=power9"], {})
    assert split.exit_status == 2
    assert "a bazel option is one word" in split.stderr
    missing = run_cli(["explain", "--root", root], {})
    assert missing.exit_status == 2 and "required: SETTING" in missing.stderr
