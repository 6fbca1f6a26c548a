"""`--mode batch`: the plan chooses how many copies of an independent-batch job to run.

Issue 17's batch-inference scenario (S7) had the plan at 0.85x the grid's best: one process
with two intra-op threads, where two pinned one-thread copies won. The count now comes from
planner/copies.py when nobody gave one: one copy per visible GPU (or MIG device), else one
per core for a convolutional model and per 4 cores for dense or unknown ones, capped by the CPU
quota and by memory. Hosts are real captures; `exec` runs real processes on this machine.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from hwtune.errors import PlanError
from hwtune.models.overrides import Overrides
from hwtune.models.profile import Setting
from hwtune.planner import plan
from hwtune.planner.copies import COPY_BYTES, CORES_PER_COPY
from hwtune.probes import detect
from hwtune.tune.tuner import TuneRequest, instance_counts, prepare
from hwtune.tune.workloads import builtin
from tests.conftest import CliResult, needs_two_cores, physical_core_count
from tests.gpu_roots import EPYC, MIG_LIST, P4D_HOST, hardware
from tests.plan_builders import GIB, make_hardware


@pytest.fixture(scope="module")
def epyc() -> object:
    """The 2 × 24-core EPYC 7451 capture (lscpu; 96 CPUs with SMT, 8 NUMA nodes)."""
    return detect(EPYC, gpus=False, tensorflow=False)


def test_a_convolutional_model_gets_one_copy_per_physical_core(epyc) -> None:  # type: ignore[no-untyped-def]
    profile = plan(epyc, mode="batch", model="conv")
    assert profile.copies is not None
    assert profile.intent.instances == profile.copies.value == 48
    # A copy is a whole core with its SMT sibling, and slices follow NUMA nodes.
    assert all(len(s.cpus) == 2 and len(s.numa_nodes) == 1 for s in profile.instances)
    assert "1 core a stream" in profile.copies.reason and "OpenVINO" in profile.copies.reason
    assert "1.17x [1.10-1.25]" in profile.copies.reason  # the measurement behind it, with where
    assert "2-vCPU EPYC Zen 4 VM" in profile.copies.reason


@pytest.mark.parametrize("model", ["dense", "unknown"])
def test_dense_and_unknown_models_get_four_cores_a_copy(epyc, model: str) -> None:  # type: ignore[no-untyped-def]
    profile = plan(epyc, mode="batch", model=model)
    assert CORES_PER_COPY[model] == 4  # type: ignore[index]
    assert profile.intent.instances == 12
    assert all(len(s.cpus) == 8 for s in profile.instances)  # 4 cores, 8 CPUs with SMT
    assert profile.copies is not None and "3-5 cores a stream" in profile.copies.reason
    assert "1.17x" not in profile.copies.reason  # measured for a CNN only


def test_each_copy_is_planned_as_its_own_slice(epyc) -> None:  # type: ignore[no-untyped-def]
    copy = plan(epyc, mode="batch", model="conv", instance=47)
    assert copy.instance.index == 47 and copy.threads.intra_op.value == 1  # SMT left idle
    assert "batch mode: as many inter-op threads" in str(copy.threads.inter_op.reason)
    assert copy.pinning is not None and copy.pinning.value is True


def test_a_count_from_anywhere_wins_over_the_rule(epyc) -> None:  # type: ignore[no-untyped-def]
    by_flag = plan(epyc, overrides=Overrides(mode="batch", model="conv", instances=3))
    assert by_flag.intent.instances == 3 and by_flag.copies is None
    one = plan(epyc, overrides=Overrides(mode="batch", model="conv", instances=1))
    assert one.intent.instances == 1 and one.copies is None  # an explicit 1 is a count too
    by_intent = plan(epyc, mode="batch", model="conv", instances=4)
    assert by_intent.intent.instances == 4 and by_intent.copies is None
    measured = {"instances": Setting(6, "measured", "measured")}
    tuned = plan(epyc, overrides=Overrides(mode="batch", model="conv"), measured=measured)
    assert tuned.intent.instances == 6 and tuned.copies is None


def test_other_modes_keep_one_process(epyc) -> None:  # type: ignore[no-untyped-def]
    for mode in ("throughput", "latency"):
        profile = plan(epyc, mode=mode, model="conv")
        assert profile.intent.instances == 1 and profile.copies is None


def test_an_instance_beyond_the_copies_names_where_the_count_came_from(epyc) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PlanError, match=r"48 instances from batch mode's copies"):
        plan(epyc, overrides=Overrides(mode="batch", model="conv", instance=48))


def test_a_cpu_quota_caps_the_copies() -> None:
    hw = make_hardware(cores_per_socket=8, quota=3.0)
    profile = plan(hw, mode="batch", model="conv")
    assert profile.intent.instances == 3
    assert profile.copies is not None and "capped at 3 by the CPU budget" in profile.copies.reason
    # Within the quota the cores decide.
    assert (
        plan(
            make_hardware(cores_per_socket=2, quota=4.0), mode="batch", model="conv"
        ).intent.instances
        == 2
    )


def test_memory_caps_the_copies() -> None:
    small = 4 * COPY_BYTES  # half of it holds two copies
    hw = make_hardware(cores_per_socket=16, memory=64 * GIB, memory_limit=small)
    profile = plan(hw, mode="batch", model="conv")
    assert profile.intent.instances == 2
    assert profile.copies is not None and "capped at 2 by memory" in profile.copies.reason
    assert "GiB cgroup memory limit over the" in profile.copies.reason  # the basis, named
    tiny = make_hardware(cores_per_socket=16, memory=64 * GIB, memory_limit=COPY_BYTES)
    assert plan(tiny, mode="batch", model="conv").intent.instances == 1  # never fewer than 1


def test_one_copy_per_gpu_tensorflow_can_use(tmp_path: Path) -> None:
    hw = detect(P4D_HOST)
    profile = plan(hw, mode="batch", model="conv")
    gpus = len(hw.gpus)
    assert gpus == 8
    assert profile.intent.instances == gpus
    assert profile.copies is not None and "Triton" in profile.copies.reason
    assert [s.gpus for s in profile.instances] == [(g,) for g in range(gpus)]


def test_gpu_copies_are_capped_by_the_cores_they_need() -> None:
    """A container given 8 GPUs but 4 CPUs: a copy per GPU would need 8 cores, which the
    planner refuses (slices never share a core), so batch mode plans 4, two GPUs each."""
    hw = detect(P4D_HOST)
    four = (0, 1, 2, 3)  # four distinct cores: the capture's SMT siblings are CPUs 48-95
    limits = dataclasses.replace(hw.limits, usable_cpus=four, effective_cpus=4)
    profile = plan(dataclasses.replace(hw, limits=limits), mode="batch", model="conv")
    assert profile.intent.instances == 4
    assert [len(s.gpus) for s in profile.instances] == [2, 2, 2, 2]
    assert profile.copies is not None
    assert "capped at 4: copies never share a physical core" in profile.copies.reason


def test_one_copy_per_mig_device(tmp_path: Path) -> None:
    hw = hardware(tmp_path, EPYC, listing=MIG_LIST)
    devices = sum(len(g.mig_devices) for g in hw.gpus)
    assert devices > len(hw.gpus)  # the capture's A100s are split into MIG devices
    profile = plan(hw, mode="batch", model="conv")
    if not profile.instances[0].gpus:
        pytest.skip("no TensorFlow here that could use these GPUs: the CPU rule applies")
    assert profile.intent.instances == devices
    assert profile.copies is not None and "per MIG device" in profile.copies.reason


# -- the commands ---------------------------------------------------------------------------


def test_plan_shows_the_copies_row(cli) -> None:  # type: ignore[no-untyped-def]
    result: CliResult = cli(["plan", "--root", str(EPYC), "--mode", "batch", "--model", "conv"])
    assert result.exit_status == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("copies"))
    assert re.match(r"copies\s+48\s+batch mode: 48 copies", row)
    assert "instance                         0 of 48" in result.stdout
    # A lone process planned this way would run on copy 0's share: the note says so.
    assert "batch mode plans 48 copies; this plan is copy 0's share (CPUs 0,48)" in result.stderr
    assert "hwtune exec --mode batch -- CMD" in result.stderr
    one = cli(["plan", "--root", str(EPYC), "--mode", "batch", "--instances", "1"])
    assert one.exit_status == 0 and "batch mode plans" not in one.stderr


def test_explain_copies_gives_the_count_and_its_reason(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["explain", "copies", "--root", str(EPYC), "--mode", "batch", "--model", "conv"]
    result = cli(args)
    assert result.exit_status == 0, result.stderr
    assert result.stdout.startswith("copies = 48\n  source: rule\n  why: batch mode: 48 copies")
    thrown = cli(["explain", "copies", "--root", str(EPYC)])  # not batch mode: no such row
    assert thrown.exit_status != 0 and "no setting named 'copies'" in thrown.stderr


def test_config_and_environment_take_batch(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"HWTUNE_MODE": "batch", "HWTUNE_MODEL": "conv", "HOME": str(tmp_path)}
    result = cli(["plan", "--root", str(EPYC), "--json"], environ=env)
    assert result.exit_status == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["intent"]["mode"] == "batch" and data["copies"]["value"] == 48
    config = tmp_path / ".config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('mode = "batch"\nmodel = "dense"\n')
    result = cli(["plan", "--root", str(EPYC), "--json"], environ={"HOME": str(tmp_path)})
    assert result.exit_status == 0, result.stderr
    assert json.loads(result.stdout)["intent"]["instances"] == 12


def test_tune_starts_from_the_copies_and_searches_around_them(epyc) -> None:  # type: ignore[no-untyped-def]
    request = TuneRequest(workload=builtin("inference"), mode="batch", model="conv")
    start, space, _ = prepare(epyc, request)
    assert start.instances == 48
    counts = instance_counts(epyc, request, 48)
    assert {1, 2, 4, 8, 24, 48} <= set(counts)
    assert set(space.bases) == set(counts)


@needs_two_cores
def test_exec_starts_the_copies_the_plan_chose(tmp_path: Path) -> None:
    """Real processes on this machine: as many copies as the plan says, each on its own CPUs."""
    import subprocess

    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HWTUNE_MODE": "batch"}
    planned = subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--model", "conv", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    copies = json.loads(planned.stdout)["copies"]["value"]
    assert copies == physical_core_count()
    script = "import os; print(os.environ['HWTUNE_INSTANCE'], sorted(os.sched_getaffinity(0)))"
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "hwtune",
            "exec",
            "--model",
            "conv",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    lines = sorted(line for line in ran.stdout.splitlines() if line.startswith("["))
    assert len(lines) == copies
    cpus = [line.split(" ", 2)[2] for line in lines]
    assert len(set(cpus)) == copies  # disjoint slices


@needs_two_cores
def test_configure_in_a_process_exec_did_not_start_says_it_is_copy_0(tmp_path: Path) -> None:
    import subprocess

    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "HWTUNE_MODE": "batch",
        "HWTUNE_MODEL": "conv",
    }
    script = (
        "import hwtune; r = hwtune.configure(tensorflow=False, use_cache=False); "
        "print(r.env_set.get('TF_NUM_INTRAOP_THREADS')); print(*r.notes, sep='\\n')"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    threads, *notes = ran.stdout.splitlines()
    copies = physical_core_count()
    assert threads == "1"  # copy 0's share: one core, one thread
    assert any(
        f"batch mode plans {copies} copies; this plan is copy 0's share" in n for n in notes
    )
