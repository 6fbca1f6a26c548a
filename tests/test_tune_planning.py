"""`hwtune tune` plans through the one pipeline: the planning arguments, config files,
HWTUNE_* and the launcher's ranks mean what they mean for `hwtune plan`, and no measured
result moves the tuner's own starting point. On an OpenMP build each trial's
OMP_NUM_THREADS is that trial's intra-op count.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hwtune.errors import TuneError
from hwtune.pipeline.measured import save_result
from hwtune.pipeline.request import PlanRequest
from hwtune.tune.config import from_json, to_json, trial_env
from hwtune.tune.tuner import TuneRequest, prepare, tune
from hwtune.tune.workloads import builtin, user_command
from tests.conftest import DATA, run_cli
from tests.plan_builders import make_hardware, tf_info

HOST = str(DATA / "hosts" / "epyc7451-p4d-8xa100-gpu")  # 2 sockets × 24 cores × 2, 8 NUMA nodes


def clean_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No config file, no HWTUNE_* and no rank variable but the ones a test names."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "HWTUNE_TUNED_DIR": str(tmp_path / "tuned"),
        **extra,
    }


def dry_run(environ: dict[str, str], *args: str) -> dict[str, Any]:
    result = run_cli(["tune", "--dry-run", "--json", "--root", HOST, *args], environ)
    assert result.exit_status == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def planned(environ: dict[str, str], *args: str) -> dict[str, Any]:
    result = run_cli(["plan", "--json", "--root", HOST, *args], environ)
    assert result.exit_status == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def threads(plan: dict[str, Any]) -> tuple[int, int]:
    return plan["threads"]["intra_op"]["value"], plan["threads"]["inter_op"]["value"]


def test_tune_starts_from_what_plan_says_with_the_same_arguments(tmp_path: Path) -> None:
    environ = clean_environ(tmp_path)
    args = ("--set", "TF_NUM_INTRAOP_THREADS=3", "--model", "dense", "--instances", "2")
    tuned = dry_run(environ, *args)
    plan = planned(environ, *args)
    start = tuned["start"]
    assert (start["intra_op"], start["inter_op"]) == threads(plan) and start["intra_op"] == 3
    assert tuned["model"] == "dense" and start["instances"] == 2
    assert {c["instances"] for c in tuned["grid"]} == {2}  # --instances fixes the count
    assert tuned["fingerprint"] == plan["fingerprint"]


def test_tune_takes_planning_precedence_files_then_environment_then_flags(
    tmp_path: Path,
) -> None:
    environ = clean_environ(tmp_path)
    config = Path(environ["XDG_CONFIG_HOME"]) / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[threads]\ninter_op = 3\n")
    assert dry_run(environ)["start"]["inter_op"] == 3
    environ["HWTUNE_INTER_OP"] = "1"
    assert dry_run(environ)["start"]["inter_op"] == 1
    flagged = dry_run(environ, "--set", "TF_NUM_INTEROP_THREADS=4")
    assert flagged["start"]["inter_op"] == 4
    assert threads(planned(environ, "--set", "TF_NUM_INTEROP_THREADS=4"))[1] == 4


def test_tune_takes_the_instance_count_from_environment_and_ranks(tmp_path: Path) -> None:
    one_job = dry_run(clean_environ(tmp_path))
    assert {c["instances"] for c in one_job["grid"]} == {1}  # throughput: one training job
    searched = dry_run(clean_environ(tmp_path), "--mode", "batch")
    # 1, 2, 4, 8 NUMA nodes; batch mode's copies are one per A100 (8) and half as many (4)
    assert {c["instances"] for c in searched["grid"]} == {1, 2, 4, 8}
    assert searched["start"]["instances"] == 8
    fixed = dry_run(clean_environ(tmp_path, HWTUNE_INSTANCES="4"))
    assert {c["instances"] for c in fixed["grid"]} == {4}
    ranks = clean_environ(tmp_path, LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    by_rank = dry_run(ranks)
    assert {c["instances"] for c in by_rank["grid"]} == {2}
    assert by_rank["start"]["intra_op"] == threads(planned(ranks))[0] == 24


def test_a_measured_result_never_moves_the_tuners_start(tmp_path: Path) -> None:
    environ = clean_environ(tmp_path, HWTUNE_WORKLOAD="train")
    rules = dry_run(environ)
    save_result(
        {
            "fingerprint": rules["fingerprint"],
            "workload": "train",
            "mode": "throughput",
            "ratio": 1.4,
            "settings": {"threads.intra_op": 5, "threads.inter_op": 1, "instances": 1},
        },
        environ,
    )
    # The planning commands apply it (so this test can tell) ...
    assert threads(planned(environ)) == (5, 1)
    # ... the tuner measures against the rules' choice.
    again = dry_run(environ)
    assert again["start"] == rules["start"] and again["start"]["intra_op"] != 5
    assert threads(planned(environ, "--no-measured"))[0] == again["start"]["intra_op"]


def test_forget_uses_the_hardware_the_planning_arguments_name(tmp_path: Path) -> None:
    environ = clean_environ(tmp_path)
    fingerprint = dry_run(environ)["fingerprint"]
    record = {"fingerprint": fingerprint, "workload": "train", "ratio": 1.2, "settings": {}}
    path = save_result(record, environ)
    result = run_cli(["tune", "--root", HOST, "--forget", "train"], environ)
    assert result.exit_status == 0 and result.stdout == f"forgot {path}\n"
    assert not path.exists()


def test_forget_removes_only_the_workload_the_arguments_name(tmp_path: Path) -> None:
    """--forget without NAME takes the workload as tuning names it (--workload, --name, the
    command's key); only a bare --forget removes every workload's result."""
    environ = clean_environ(tmp_path)
    fingerprint = dry_run(environ)["fingerprint"]
    command = [sys.executable, "train.py"]
    keys = ["builtin:mlp", "train", user_command(command).key, "kept"]
    paths = {
        key: save_result(
            {"fingerprint": fingerprint, "workload": key, "ratio": 1.2, "settings": {}}, environ
        )
        for key in keys
    }
    forgotten: set[str] = set()
    for args, key in (
        (["--workload", "builtin:mlp"], keys[0]),
        (["--name", "train"], keys[1]),
        (["--", *command], keys[2]),
    ):
        result = run_cli(["tune", "--root", HOST, "--forget", *args], environ)
        assert result.exit_status == 0 and result.stdout == f"forgot {paths[key]}\n", args
        forgotten.add(key)
        assert {k for k, path in paths.items() if not path.exists()} == forgotten
    clash = run_cli(["tune", "--root", HOST, "--forget", "kept", "--workload", "x"], environ)
    assert clash.exit_status == 1 and paths["kept"].exists()
    result = run_cli(["tune", "--root", HOST, "--forget"], environ)
    assert result.exit_status == 0 and result.stdout == f"forgot {paths['kept']}\n"


def test_a_dash_dash_with_no_command_after_it_is_a_usage_error(tmp_path: Path) -> None:
    """`hwtune tune -- $CMD` with CMD empty: tuning the built-in CNN for the whole budget, or
    (with --forget) removing every workload's result, would not be what was asked."""
    environ = clean_environ(tmp_path)
    fingerprint = dry_run(environ)["fingerprint"]
    kept = save_result(
        {"fingerprint": fingerprint, "workload": "kept", "ratio": 1.2, "settings": {}}, environ
    )
    for argv in (
        ["tune", "--root", HOST, "--forget", "--"],
        ["tune", "--dry-run", "--"],
        ["tune", "--budget", "1", "--no-store", "--"],
    ):
        result = run_cli(argv, environ)
        assert result.exit_status == 2, (argv, result)
        assert "no command after --" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert kept.exists()


def test_tune_rejects_the_measured_switches_and_bad_planning_values(tmp_path: Path) -> None:
    environ = clean_environ(tmp_path)
    for argv in (
        ["tune", "--dry-run", "--no-measured"],
        ["tune", "--dry-run", "--set", "TF_NUM_INTRAOP_THREADS=abc"],
    ):
        result = run_cli(argv, environ)
        assert result.exit_status == 2 and "usage: hwtune tune" in result.stderr


# -- OpenMP builds ------------------------------------------------------------------------

ENV_LOGGER = (
    "import os\n"
    "with open(os.environ['TRIAL_LOG'], 'a') as log:\n"
    "    log.write(f\"{os.environ.get('TF_NUM_INTRAOP_THREADS')} "
    "{os.environ.get('OMP_NUM_THREADS')}\\n\")\n"
    "print('hwtune-metric: steps=100')\n"
)


@pytest.mark.parametrize("runtime", ["openmp", "eigen"])
def test_each_trial_gets_omp_num_threads_from_its_own_intra_op_count(
    tmp_path: Path, runtime: str
) -> None:
    hw = make_hardware(
        cores_per_socket=4, tensorflow=tf_info(runtime=runtime, openmp_library="libiomp5.so")
    )
    script, log = tmp_path / "trial.py", tmp_path / "trials.log"
    script.write_text(ENV_LOGGER)
    request = TuneRequest(
        user_command([sys.executable, "-I", "-S", str(script)]),
        budget_s=60,
        instances=1,
        store=False,
        planning=PlanRequest(environ=clean_environ(tmp_path)),
    )
    # An applied profile's OMP_NUM_THREADS in the caller's environment must not leak in.
    environ = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "99", "TRIAL_LOG": str(log)}
    report = tune(hw, request, environ=environ)
    seen = [line.split() for line in log.read_text().splitlines()]
    intra_counts = {intra for intra, _ in seen if intra != "None"}
    assert len(seen) == len(report.outcome.trials) and len(intra_counts) >= 2
    for intra, omp in seen:
        if runtime == "eigen" or intra == "None":
            assert omp == "None"
        else:
            assert omp == intra


def test_an_omp_num_threads_the_user_sets_is_kept_in_every_trial(tmp_path: Path) -> None:
    hw = make_hardware(
        cores_per_socket=4, tensorflow=tf_info(runtime="openmp", openmp_library="libgomp.so.1")
    )
    planning = PlanRequest(environ=clean_environ(tmp_path), sets=("OMP_NUM_THREADS=3",))
    start, space, _ = prepare(hw, TuneRequest(builtin("cnn"), instances=1, planning=planning))
    configs = list(space.grid())
    assert start.openmp and {c.intra for c in configs} >= {1, 4}
    assert {trial_env(c, 0, {})["OMP_NUM_THREADS"] for c in configs} == {"3"}
    # The result file's "start"/"best" keep it, so a benchmark re-runs the trial as it ran.
    assert from_json(to_json(start)) == start and to_json(start)["openmp"] is True


def test_instance_k_of_a_fixed_count_gives_the_start_its_plan(tmp_path: Path) -> None:
    from hwtune.planner import plan

    hw = make_hardware(cores_per_socket=3)  # two copies: slices of 2 and 1 cores
    environ = clean_environ(tmp_path)
    for k in (0, 1):
        planning = PlanRequest(environ=environ, instances=2, instance=k)
        request = TuneRequest(builtin("cnn"), instances=2, planning=planning)
        start, _, _ = prepare(hw, request)
        assert start.intra == plan(hw, instances=2, instance=k).threads.intra_op.value
        assert start.instances == 2  # the trial still runs both copies
        # Each copy pinned to its own slice (issue 17's rule), the one-core slice too.
        assert start.cpus == tuple(s.cpus for s in plan(hw, instances=2).instances)


def test_trials_of_a_plan_for_other_hardware_are_refused(tmp_path: Path) -> None:
    from hwtune.planner import fingerprint
    from hwtune.probes import detect

    environ = clean_environ(tmp_path)
    there = dry_run(environ)["fingerprint"]
    if there == fingerprint(detect()):
        pytest.skip("this machine is the captured host the test plans for")
    result = run_cli(["tune", "--root", HOST, "--budget", "30"], environ)
    assert result.exit_status == 1
    assert f"--root {HOST} is other hardware ({there})" in result.stderr
    assert "--dry-run" in result.stderr and not (tmp_path / "tuned").exists()


def test_a_trial_still_running_when_the_budget_ends_is_stopped_then(tmp_path: Path) -> None:
    """The 5th trial hangs (4 trials of 0.5 s before it: 2 s or more into a 5 s budget): it is
    stopped when the budget ends, not a whole timeout (then capped at the whole budget) after
    it began, and no setting is blamed. The bounds are the trials' own times, not a guess at
    how fast this machine starts them: the hung trial writes when it began."""
    budget = 5
    hw = make_hardware(cores_per_socket=4)
    script = tmp_path / "trial.py"
    script.write_text(
        "import os, time\n"
        "with open(os.environ['RUNS_FILE'], 'a') as runs:\n"
        "    runs.write('x')\n"
        "if os.path.getsize(os.environ['RUNS_FILE']) == 5:\n"
        "    with open(os.environ['HUNG_FILE'], 'w') as hung:\n"
        "        hung.write(repr(time.monotonic()))\n"  # CLOCK_MONOTONIC: the test's clock
        "    time.sleep(600)\n"
        "time.sleep(0.5)\n"
        "print('hwtune-metric: rate=100')\n"
    )
    request = TuneRequest(
        user_command([sys.executable, "-I", "-S", str(script)]),
        budget_s=budget,
        instances=1,
        store=False,
        planning=PlanRequest(environ=clean_environ(tmp_path)),
    )
    environ = {
        **clean_environ(tmp_path),
        "RUNS_FILE": str(tmp_path / "runs"),
        "HUNG_FILE": str(tmp_path / "hung"),
    }
    started = time.monotonic()
    with pytest.raises(TuneError, match=f"--budget {budget} s was used up before any comparison"):
        tune(hw, request, environ={**environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    ended = time.monotonic()
    assert (tmp_path / "runs").stat().st_size == 5  # the 5th began within the budget
    hung_at = float((tmp_path / "hung").read_text())
    assert hung_at - started >= 4 * 0.5
    # Stopped at the budget's end: at most budget - 2 s after it began (plus the stop itself);
    # without the cap, a whole budget after it began.
    assert ended - hung_at < budget, (hung_at - started, ended - started)
    assert ended - started < budget + 3  # the budget held, give or take a stop


def test_the_hint_after_a_budget_too_short_asks_for_more_than_it(tmp_path: Path) -> None:
    """The first trial outlives a 1 s budget: the hint names a longer budget, never the one
    that just failed (nor --budget 0 when no trial finished)."""
    script = tmp_path / "trial.py"
    script.write_text("import time\ntime.sleep(600)\n")
    request = TuneRequest(
        user_command([sys.executable, "-I", "-S", str(script)]),
        budget_s=1,
        instances=1,
        store=False,
        planning=PlanRequest(environ=clean_environ(tmp_path)),
    )
    environ = {**clean_environ(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(TuneError) as caught:
        tune(make_hardware(cores_per_socket=4), request, environ=environ)
    assert "(no trial finished)" in caught.value.message
    assert caught.value.hint == "give at least --budget 2; nothing was stored"
