"""Local rank and ranks per node from Slurm, MPI and torchrun variables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hwtune.apply.cache import cache_key
from hwtune.apply.render import env_map
from hwtune.errors import ConfigError, PlanError
from hwtune.models.hardware import CpuInfo, Hardware, Limits
from hwtune.pipeline.ranks import already_pinned, expand_slurm_tasks, local_rank
from hwtune.pipeline.request import PlanRequest, profile_for, resolve_share
from tests.conftest import needs_two_cores


@pytest.mark.parametrize(
    ("environ", "rank", "size", "launcher"),
    [
        (
            {"SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_STEP_ID": "0"},
            1,
            4,
            "Slurm",
        ),
        (
            {
                "SLURM_LOCALID": "0",
                "SLURM_TASKS_PER_NODE": "2(x3),1",
                "SLURM_NODEID": "3",
                "SLURM_STEP_ID": "0",
            },
            0,
            1,
            "Slurm",
        ),
        (
            {
                "SLURM_LOCALID": "1",
                "SLURM_TASKS_PER_NODE": "2(x3),1",
                "SLURM_NODEID": "2",
                "SLURM_STEPID": "7",
            },
            1,
            2,
            "Slurm",
        ),
        # srun's step count wins over the job's
        (
            {"SLURM_LOCALID": "2", "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_NTASKS_PER_NODE": "8"},
            2,
            3,
            "Slurm",
        ),
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, 3, 8, "Open MPI"),
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, 1, 2, "torchrun"),
        ({"MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}, 0, 2, "MPICH/Intel MPI"),
        ({"MV2_COMM_WORLD_LOCAL_RANK": "1", "MV2_COMM_WORLD_LOCAL_SIZE": "2"}, 1, 2, "MVAPICH2"),
        ({"PMI_LOCAL_RANK": "5", "PMI_LOCAL_SIZE": "6"}, 5, 6, "PMI"),
        ({"PALS_LOCAL_RANKID": "1", "PALS_LOCAL_SIZE": "4"}, 1, 4, "PALS"),
        ({"HWTUNE_INSTANCE": "1", "HWTUNE_INSTANCES": "3"}, 1, 3, "hwtune exec"),
        # innermost launcher wins: torchrun inside an srun step
        (
            {
                "LOCAL_RANK": "3",
                "LOCAL_WORLD_SIZE": "4",
                "SLURM_LOCALID": "0",
                "SLURM_NTASKS_PER_NODE": "1",
                "SLURM_STEP_ID": "0",
            },
            3,
            4,
            "torchrun",
        ),
    ],
)
def test_local_rank_sources(environ: dict[str, str], rank: int, size: int, launcher: str) -> None:
    found = local_rank(environ)
    assert found is not None and (found.rank, found.size, found.launcher) == (rank, size, launcher)


def test_no_launcher_and_incomplete_pairs() -> None:
    assert local_rank({}) is None
    assert local_rank({"LOCAL_RANK": "0"}) is None  # torch.distributed.launch --use_env: no size
    assert local_rank({"SLURM_LOCALID": "0"}) is None


@pytest.mark.parametrize(
    "environ",
    [
        {"SLURM_LOCALID": "x", "SLURM_STEP_TASKS_PER_NODE": "2"},
        {"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_ID": "0"},
        {"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x", "SLURM_STEP_ID": "0"},
        {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "1"},
        {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "0"},
        {"LOCAL_RANK": "-1", "LOCAL_WORLD_SIZE": "2"},
    ],
)
def test_malformed_rank_variables_are_clear_errors(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as err:
        local_rank(environ)
    assert any(name in err.value.message for name in environ)


def test_expand_slurm_tasks() -> None:
    assert expand_slurm_tasks("2(x3),1") == [2, 2, 2, 1]
    for bad in ("", "2(x)", "(x2)", "2,,1", "a"):
        with pytest.raises(ValueError):
            expand_slurm_tasks(bad)


def _hw(
    affinity: tuple[int, ...], cpuset: tuple[int, ...] | None, online: tuple[int, ...]
) -> Hardware:
    return Hardware(
        cpu=CpuInfo(online_cpus=online), limits=Limits(affinity_cpus=affinity, cpuset_cpus=cpuset)
    )


def test_a_rank_the_launcher_pinned_is_planned_as_one_instance() -> None:
    ranks = {"SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_ID": "0"}
    flags, notes, origins = resolve_share({}, ranks, _hw((2, 3), (0, 1, 2, 3), (0, 1, 2, 3)))
    assert flags == {"instances": 1, "instance": 0} and "already bound" in notes[0]
    bound = "SLURM_LOCALID=1 bound to CPUs 2-3 (from the launcher's environment)"
    assert origins == {"instances": bound, "instance": bound}
    _, notes, _ = resolve_share({}, ranks, _hw((3,), (0, 1, 2, 3), (0, 1, 2, 3)))
    assert "the launcher already bound it to CPU 3, so" in notes[0]  # one CPU reads singular
    flags, notes, origins = resolve_share({}, ranks, _hw((0, 1, 2, 3), None, (0, 1, 2, 3)))
    assert flags == {"instances": 2, "instance": 1} and "slice 1 of 2" in notes[0]
    assert origins == {
        "instances": "SLURM_NTASKS_PER_NODE=2 (from the launcher's environment)",
        "instance": "SLURM_LOCALID=1 (from the launcher's environment)",
    }
    flags, _, origins = resolve_share({"instances": 3}, ranks, _hw((0, 1), None, (0, 1)))
    assert flags == {"instances": 3} and origins == {}  # explicit flags win
    assert (
        already_pinned((0,), (0, 1))
        and not already_pinned((0, 1), (0, 1))
        and not already_pinned((), (0,))
    )


@needs_two_cores
def test_env_differs_per_rank_and_cache_keys_differ() -> None:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_"))
    }
    base.pop("LOCAL_RANK", None)
    whole = profile_for(PlanRequest(base))
    rank = profile_for(
        PlanRequest({**base, "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    )
    assert rank.profile.intent.instances == 2 and rank.profile.intent.instance == 1
    assert set(rank.profile.instance.cpus) < set(whole.profile.instance.cpus)
    assert int(env_map(rank.profile)["TF_NUM_INTRAOP_THREADS"]) <= int(
        env_map(whole.profile)["TF_NUM_INTRAOP_THREADS"]
    )
    assert cache_key({}, (1, 2)) != cache_key({}, (0, 2)) != cache_key({}, None)


@needs_two_cores
def test_env_command_prints_each_ranks_slice(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_"))
    }
    base["XDG_CACHE_HOME"] = str(tmp_path)
    whole = json.loads(run_cli(["env", "--format", "json"], base).stdout)
    step = {"SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_STEP_ID": "0"}
    ranked = run_cli(["env"], {**base, **step})
    assert ranked.exit_status == 0
    assert "# local rank 1 of 2 (Slurm: SLURM_LOCALID, SLURM_NTASKS_PER_NODE)" in ranked.stdout
    mine = profile_for(PlanRequest(base, instances=2, instance=1)).profile
    assert (
        f"export TF_NUM_INTRAOP_THREADS='{env_map(mine)['TF_NUM_INTRAOP_THREADS']}'"
        in ranked.stdout
    )
    assert int(env_map(mine)["TF_NUM_INTRAOP_THREADS"]) <= int(whole["TF_NUM_INTRAOP_THREADS"])


def _no_launcher(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_", "LOCAL_"))
    }
    environ.update(XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    return environ


@pytest.mark.parametrize(
    "launcher",
    [
        {"HWTUNE_INSTANCE": "1", "HWTUNE_INSTANCES": "2"},  # a parent `hwtune exec --instances 2`
        {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},  # torchrun: this always worked
    ],
    ids=["hwtune-exec", "torchrun"],
)
def test_explicit_instances_win_over_the_launchers_index(
    launcher: dict[str, str], tmp_path: Path
) -> None:
    """docs/apply.md: "Explicit --instances/--instance win". Before: HWTUNE_INSTANCE=1 stayed
    the index of `--instances 1` (instance 1 does not exist, exit 1)."""
    from tests.conftest import run_cli

    environ = {**_no_launcher(tmp_path), **launcher}
    for cache in ([], ["--no-cache"]):
        result = run_cli(["env", "--instances", "1", "--format", "json", *cache], environ)
        assert result.exit_status == 0, result.stderr
    from tests.plan_builders import make_hardware

    def intent(**flags: int) -> tuple[int, int]:
        hw = make_hardware(cores_per_socket=4)
        planned = profile_for(PlanRequest(environ, hardware=hw, **flags)).profile.intent
        return planned.instances, planned.instance

    assert intent() == (2, 1)  # the launcher's share
    assert intent(instances=1) == (1, 0)
    assert intent(instances=2) == (2, 0)  # the count given starts the index at 0
    assert intent(instances=3, instance=2) == (3, 2)
    if "HWTUNE_INSTANCES" in launcher:  # an index alone keeps the count HWTUNE_INSTANCES sets
        assert intent(instance=0) == (2, 0)


def test_an_instance_beyond_the_count_names_where_it_came_from(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    environ = _no_launcher(tmp_path)
    variable = run_cli(["plan", "--instances", "1"], {**environ, "HWTUNE_INSTANCE": "1"})
    assert variable.exit_status == 0, variable.stderr  # the flag's count starts the index at 0
    variable = run_cli(["plan"], {**environ, "HWTUNE_INSTANCE": "1"})
    assert variable.exit_status == 1
    assert "(instance 1 from HWTUNE_INSTANCE, 1 instance from the default)" in variable.stderr
    assert "hint: HWTUNE_INSTANCE=K takes 0 ≤ K < the instance count" in variable.stderr
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("instances = 2\ninstance = 3\n")
    from_file = run_cli(["plan"], environ)
    assert from_file.exit_status == 1
    said = f"(instance 3 from 'instance' in {config}, 2 instances from 'instances' in {config})"
    assert said in from_file.stderr
    assert f"hint: 'instance' in {config} takes 0 ≤ K < the instance count" in from_file.stderr
    # A later source that sets the count alone starts the index over, as a flag does.
    later = run_cli(["plan"], {**environ, "HWTUNE_INSTANCES": "1"})
    assert later.exit_status == 0, later.stderr
    flags = run_cli(["plan", "--instances", "2", "--instance", "3"], environ)
    assert "(instance 3 from --instance, 2 instances from --instances)" in flags.stderr
    assert "hint: --instance K takes 0 ≤ K < --instances N" in flags.stderr


def test_a_count_from_the_launcher_names_its_variable_not_a_flag(tmp_path: Path) -> None:
    """More ranks than cores: the error named --instances, which the user never passed."""
    from tests.plan_builders import make_hardware

    hw = make_hardware(cores_per_socket=2)
    launcher = {**_no_launcher(tmp_path), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8"}
    with pytest.raises(PlanError) as raised:
        profile_for(PlanRequest(launcher, hardware=hw))
    said = str(raised.value)
    assert said.startswith("LOCAL_WORLD_SIZE=8 (from the launcher's environment): 8 instances")
    assert "start at most 2 ranks on this node" in said and "--instances" not in said
    slurm = {**_no_launcher(tmp_path), "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}
    with pytest.raises(PlanError, match=r"^SLURM_STEP_TASKS_PER_NODE=4\(x2\) \(from the"):
        profile_for(PlanRequest(slurm, hardware=hw))
    # A count the user typed is still named as the flag, with the flag's hint.
    with pytest.raises(PlanError) as typed:
        profile_for(PlanRequest(_no_launcher(tmp_path), hardware=hw, instances=8))
    assert str(typed.value).startswith("8 instances need")
    assert "use --instances 2 or fewer" in str(typed.value)


def test_a_count_from_a_variable_or_a_config_file_names_it(tmp_path: Path) -> None:
    """HWTUNE_INSTANCES and a config file's `instances` set the count without a flag: the
    error names them; the Python API's hint names its keyword, not the flag."""
    from tests.plan_builders import make_hardware

    hw = make_hardware(cores_per_socket=2)
    variable = {**_no_launcher(tmp_path), "HWTUNE_INSTANCES": "8"}
    with pytest.raises(PlanError, match=r"^HWTUNE_INSTANCES: 8 instances need"):
        profile_for(PlanRequest(variable, hardware=hw))
    config = tmp_path / "xdg" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("instances = 8\n")
    with pytest.raises(PlanError) as raised:
        profile_for(PlanRequest(_no_launcher(tmp_path), hardware=hw))
    assert str(raised.value).startswith(f"'instances' in {config}: 8 instances need")
    config.unlink()
    with pytest.raises(PlanError) as keyword:
        profile_for(PlanRequest(_no_launcher(tmp_path), hardware=hw, instances=8, keywords=True))
    assert "use instances=2 or fewer" in str(keyword.value)


# -- each launcher's environment, as its documentation or source says a rank gets it ----------
# A rank is (local rank, ranks on its node, node index, ranks per node of the whole job).


def _torchrun(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # torch/distributed/elastic/agent/server/local_elastic_agent.py, `_start_workers`
    first = sum(per_node[:node])
    return {
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(size),
        "RANK": str(first + local),
        "WORLD_SIZE": str(sum(per_node)),
        "GROUP_RANK": str(node),
    }


def _open_mpi(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # docs.open-mpi.org, "Environment variables set for MPI applications"
    return {
        "OMPI_COMM_WORLD_RANK": str(sum(per_node[:node]) + local),
        "OMPI_COMM_WORLD_SIZE": str(sum(per_node)),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(size),
        "OMPI_COMM_WORLD_NODE_RANK": str(local),
    }


def _hydra(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # MPICH Hydra's proxy and Intel MPI: PMI_RANK/PMI_SIZE are global, MPI_LOCAL* node-local
    return {
        "PMI_RANK": str(sum(per_node[:node]) + local),
        "PMI_SIZE": str(sum(per_node)),
        "MPI_LOCALRANKID": str(local),
        "MPI_LOCALNRANKS": str(size),
    }


def _compressed(per_node: list[int]) -> str:
    """Slurm's uint16_array_to_str (src/common/env.c): runs as COUNT(xREPEAT)."""
    runs: list[list[int]] = []
    for count in per_node:
        if runs and runs[-1][0] == count:
            runs[-1][1] += 1
        else:
            runs.append([count, 1])
    return ",".join(f"{c}(x{n})" if n > 1 else str(c) for c, n in runs)


def _srun(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # slurmstepd (setup_env) and srun (env_array_for_step): SLURM_NODEID is the step's node
    # index, SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE the step's layout.
    layout = _compressed(per_node)
    return {
        "SLURM_PROCID": str(sum(per_node[:node]) + local),
        "SLURM_LOCALID": str(local),
        "SLURM_NODEID": str(node),
        "SLURM_NTASKS": str(sum(per_node)),
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_TASKS_PER_NODE": layout,
        "SLURM_TASKS_PER_NODE": layout,
    }


def _one_task_per_node(node: int, per_node: list[int]) -> dict[str, str]:
    """The Slurm variables of a launcher started as one srun task per node, which its ranks
    inherit (torchrun under srun, mpirun's daemons started with srun)."""
    return _srun(0, 1, node, [1] * len(per_node))


def _horovod(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # horovod/runner/gloo_run.py, `create_slot_env_vars`; horovodrun started inside an sbatch
    # script, whose batch step has SLURM_LOCALID=0.
    return {
        **_one_task_per_node(node, per_node),
        "HOROVOD_RANK": str(sum(per_node[:node]) + local),
        "HOROVOD_SIZE": str(sum(per_node)),
        "HOROVOD_LOCAL_RANK": str(local),
        "HOROVOD_LOCAL_SIZE": str(size),
        "HOROVOD_CROSS_RANK": str(node),
        "HOROVOD_CROSS_SIZE": str(len(per_node)),
    }


def _deepspeed(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    # deepspeed/launcher/launch.py, started once per node (its Slurm runner uses srun): it sets
    # LOCAL_RANK and LOCAL_SIZE, and no LOCAL_WORLD_SIZE.
    return {
        **_one_task_per_node(node, per_node),
        "RANK": str(sum(per_node[:node]) + local),
        "WORLD_SIZE": str(sum(per_node)),
        "LOCAL_RANK": str(local),
        "LOCAL_SIZE": str(size),
        "CROSS_RANK": str(node),
        "CROSS_SIZE": str(len(per_node)),
    }


def _pals(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    return {
        "PALS_RANKID": str(sum(per_node[:node]) + local),
        "PALS_NODEID": str(node),
        "PALS_LOCAL_RANKID": str(local),
        "PALS_LOCAL_SIZE": str(size),
    }


def _torchrun_in_srun(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    return {**_one_task_per_node(node, per_node), **_torchrun(local, size, node, per_node)}


def _mpirun_in_slurm(local: int, size: int, node: int, per_node: list[int]) -> dict[str, str]:
    return {**_one_task_per_node(node, per_node), **_open_mpi(local, size, node, per_node)}


LAUNCHERS = {
    "torchrun": _torchrun,
    "open-mpi": _open_mpi,
    "hydra": _hydra,
    "srun": _srun,
    "horovod-gloo": _horovod,
    "deepspeed": _deepspeed,
    "pals": _pals,
    "torchrun-in-srun": _torchrun_in_srun,
    "mpirun-in-slurm": _mpirun_in_slurm,
}
# ranks per node: 2 nodes × 4, a heterogeneous 3 + 1, a single rank
LAYOUTS = {"2x4": [4, 4], "3+1": [3, 1], "single": [1]}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_each_rank_of_a_node_gets_its_own_cpus_and_gpus(
    launcher: str, layout: str, tmp_path: Path
) -> None:
    from tests.plan_builders import make_gpus, make_hardware

    per_node = LAYOUTS[layout]
    hw = make_hardware(sockets=2, cores_per_socket=6, gpus=make_gpus(4, numa_nodes=[0, 0, 1, 1]))
    base = _no_launcher(tmp_path)
    for node, size in enumerate(per_node):
        cpus: list[set[int]] = []
        gpus: list[set[int]] = []
        for local in range(size):
            environ = {**base, **LAUNCHERS[launcher](local, size, node, per_node)}
            found = local_rank(environ)
            assert found is not None and (found.rank, found.size) == (local, size), found
            profile = profile_for(PlanRequest(environ, hardware=hw)).profile
            assert (profile.intent.instances, profile.intent.instance) == (size, local)
            cpus.append(set(profile.instance.cpus))
            gpus.append(set(profile.instance.gpus))
        assert all(cpus) and all(gpus)
        assert sum(map(len, cpus)) == len(set().union(*cpus)) == 12  # disjoint, all used
        assert sum(map(len, gpus)) == len(set().union(*gpus)) == 4


@pytest.mark.parametrize(
    "environ",
    [
        {"JOB_COMPLETION_INDEX": "3"},  # Kubernetes Indexed Job: the pod's index in the job
        {"TF_CONFIG": json.dumps({"task": {"type": "worker", "index": 3}})},  # Kubeflow
        {"RANK": "3", "WORLD_SIZE": "8", "NODE_RANK": "1"},  # torch's global rank alone
        {"PMIX_RANK": "5", "PMI_RANK": "5", "PMI_SIZE": "8"},  # global PMI ranks
        {"SLURM_PROCID": "5", "SLURM_NTASKS": "8"},  # Slurm's global task id
    ],
)
def test_a_global_rank_is_not_read_as_a_local_one(environ: dict[str, str]) -> None:
    assert local_rank(environ) is None


@needs_two_cores
def test_a_rank_without_its_count_never_takes_another_launchers(tmp_path: Path) -> None:
    """LOCAL_RANK without LOCAL_WORLD_SIZE (a custom script, DeepSpeed-less launch) fell
    through to the enclosing Slurm step's SLURM_LOCALID/count without a word, as if that were
    this process's rank. The inner count is unknown: the enclosing slice is planned whole and
    the plan says so; with no enclosing launcher the process is planned alone, and says so."""
    from tests.conftest import run_cli

    environ = _no_launcher(tmp_path)
    step = {"SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2"}
    inner = run_cli(["env"], {**environ, **step, "LOCAL_RANK": "3"})
    assert inner.exit_status == 0, inner.stderr
    said = " ".join(line.lstrip("# ") for line in inner.stdout.splitlines())
    assert "LOCAL_RANK=3 is set without LOCAL_WORLD_SIZE or LOCAL_SIZE" in said
    assert "planned the whole share of the launcher around it, local rank 1 of 2 (Slurm" in said
    assert (local_rank({**step, "LOCAL_RANK": "3"}) or step).uncounted == "LOCAL_RANK"
    mine = profile_for(PlanRequest(environ, instances=2, instance=1)).profile
    threads = env_map(mine)["TF_NUM_INTRAOP_THREADS"]
    assert f"export TF_NUM_INTRAOP_THREADS='{threads}'" in inner.stdout  # Slurm's slice 1 of 2
    alone = run_cli(["env"], {**environ, "LOCAL_RANK": "3"})
    assert alone.exit_status == 0, alone.stderr
    said = " ".join(line.lstrip("# ") for line in alone.stdout.splitlines())
    assert "LOCAL_RANK=3 is set without LOCAL_WORLD_SIZE" in said
    assert "planned as if it ran alone" in said
    # A complete pair of the same launcher (DeepSpeed's LOCAL_SIZE) is this process's rank.
    deepspeed = local_rank({**step, "LOCAL_RANK": "3", "LOCAL_SIZE": "4"})
    assert deepspeed is not None and deepspeed.uncounted is None and deepspeed.size == 4
    # "-1", how some scripts say "not distributed", is no rank.
    assert run_cli(["env"], {**environ, "LOCAL_RANK": "-1"}).stdout.count("LOCAL_RANK") == 0


@pytest.mark.parametrize(
    "step",
    [
        {},  # the batch script: sbatch exports no SLURM_STEP_ID, srun sets it for every step
        {"SLURM_STEP_ID": "4294967294"},  # SLURM_BATCH_SCRIPT before Slurm 20.11
        {"SLURM_STEP_ID": "4294967291"},  # SLURM_BATCH_SCRIPT since 20.11
        {"SLURM_STEPID": "batch"},
        {"SLURM_STEP_ID": "4294967292", "SLURM_STEP_TASKS_PER_NODE": "4"},  # the extern step
    ],
    ids=["no-step", "batch-old", "batch", "batch-name", "extern"],
)
@needs_two_cores
def test_a_slurm_batch_script_is_planned_alone(step: dict[str, str], tmp_path: Path) -> None:
    """sbatch's script (one process on the first node) has SLURM_LOCALID=0 and the job's
    SLURM_NTASKS_PER_NODE/SLURM_TASKS_PER_NODE (its later srun steps' tasks): it was planned
    slice 0 of 2, half the node for a process that is alone on it."""
    from tests.conftest import run_cli

    environ = _no_launcher(tmp_path)
    job = {
        "SLURM_JOB_ID": "200505",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_TASKS_PER_NODE": "2",
        **step,
    }
    assert local_rank(job) is None
    batch = run_cli(["env", "--format", "json"], {**environ, **job})
    alone = run_cli(["env", "--format", "json"], environ)
    assert batch.exit_status == alone.exit_status == 0, batch.stderr
    mine, whole = json.loads(batch.stdout), json.loads(alone.stdout)
    assert mine["TF_NUM_INTRAOP_THREADS"] == whole["TF_NUM_INTRAOP_THREADS"]
    said = run_cli(["env"], {**environ, **job}).stdout
    assert "a Slurm process outside any srun step" in said
    # The srun step's own tasks still split the node.
    task = local_rank({**job, "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "2"})
    assert task is not None and (task.rank, task.size) == (0, 2)


# A job start under a launcher: configure() and whether it detected and planned (the planner
# is imported only then; a cached profile or failure costs no probes).
_START = """
import json, sys, warnings
import hwtune
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    hwtune.configure(tensorflow=False)
print(json.dumps({"planned": "hwtune.planner" in sys.modules,
                  "warned": [str(w.message) for w in caught]}))
"""


def test_a_rank_whose_plan_failed_is_not_planned_again_at_every_start(tmp_path: Path) -> None:
    """More ranks than any node has cores: the plan fails, configure() warns and changes
    nothing; nothing was cached, so every start of every rank detected and planned again."""
    import subprocess

    from tests.apply_profiles import PYTHON
    from tests.conftest import REPO, isolated_environ

    environ = isolated_environ(
        tmp_path, PYTHONPATH=str(REPO), LOCAL_RANK="5", LOCAL_WORLD_SIZE="8192"
    )

    def start(**extra: str) -> dict[str, object]:
        done = subprocess.run(
            [PYTHON, "-c", _START],
            capture_output=True,
            text=True,
            env={**environ, **extra},
            timeout=120,
            check=True,
        )
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    first, again = start(), start()
    assert first["planned"] is True and again["planned"] is False
    assert first["warned"] == again["warned"]
    assert "LOCAL_WORLD_SIZE=8192 (from the launcher's environment)" in str(again["warned"])
    # What the fingerprint covers still plans afresh: a HWTUNE_ variable, another count.
    assert start(HWTUNE_MODE="latency")["planned"] is True
    fixed = start(LOCAL_WORLD_SIZE="8")
    assert fixed["planned"] is True


def test_a_cached_failure_names_this_launchers_variables(tmp_path: Path) -> None:
    """The cache was keyed by the rank numbers alone: Open MPI's rank 5 of 8192 got the error
    cached for torchrun's rank 5 of 8192, naming LOCAL_WORLD_SIZE, which it never set."""
    import subprocess

    from tests.apply_profiles import PYTHON
    from tests.conftest import REPO, isolated_environ

    environ = isolated_environ(tmp_path, PYTHONPATH=str(REPO))

    def start(**launcher: str) -> dict[str, object]:
        done = subprocess.run(
            [PYTHON, "-c", _START],
            capture_output=True,
            text=True,
            env={**environ, **launcher},
            timeout=120,
            check=True,
        )
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    torchrun = start(LOCAL_RANK="5", LOCAL_WORLD_SIZE="8192")
    assert "LOCAL_WORLD_SIZE=8192 (from the launcher's environment)" in str(torchrun["warned"])
    mpi = start(OMPI_COMM_WORLD_LOCAL_RANK="5", OMPI_COMM_WORLD_LOCAL_SIZE="8192")
    said = str(mpi["warned"])
    assert "OMPI_COMM_WORLD_LOCAL_SIZE=8192 (from the launcher's environment)" in said
    assert "LOCAL_WORLD_SIZE" not in said
    # Each launcher's own entry is still used at its next start.
    assert start(LOCAL_RANK="5", LOCAL_WORLD_SIZE="8192")["planned"] is False
