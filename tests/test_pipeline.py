"""One pipeline: every planning command gives the same answer for the same inputs, with the
precedence the README states (files < HWTUNE_* < flags, `--set` is a flag), and bad flag values
are usage errors (exit 2, the subcommand's own usage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, isolated_environ, run_cli

P4D = DATA / "hosts" / "epyc7451-p4d-8xa100-gpu"


def answers(tmp_path: Path, environ: dict[str, str], *flags: str) -> dict[str, object]:
    """TF_NUM_INTRAOP_THREADS/TF_NUM_INTEROP_THREADS as plan, env and apply give them."""
    plan = run_cli(["plan", "--json", *flags], environ)
    assert plan.exit_status == 0, plan.stderr
    profile = json.loads(plan.stdout)
    env = run_cli(["env", "--format", "json", *flags], environ)
    assert env.exit_status == 0, env.stderr
    variables = json.loads(env.stdout)
    output = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    applied = run_cli(["apply", "--output", str(output), *flags], environ)
    assert applied.exit_status == 0, applied.stderr
    written = json.loads((output / "hwtune.json").read_text())
    pbtxt = (output / "tf_config.pbtxt").read_text()
    return {
        "plan": (profile["threads"]["intra_op"]["value"], profile["threads"]["inter_op"]["value"]),
        "env": (
            int(variables["TF_NUM_INTRAOP_THREADS"]),
            int(variables["TF_NUM_INTEROP_THREADS"]),
        ),
        "apply": (
            int(written["TF_NUM_INTRAOP_THREADS"]),
            int(written["TF_NUM_INTEROP_THREADS"]),
        ),
        "pbtxt": tuple(
            int(line.split(":")[1])
            for line in pbtxt.splitlines()
            if line.startswith(("intra_op_parallelism", "inter_op_parallelism"))
        ),
    }


@pytest.mark.parametrize(
    ("ranks", "intra"),
    [
        ({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, 24),
        ({"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4", "SLURM_STEP_ID": "0"}, 12),
    ],
)
def test_plan_env_and_apply_agree_under_a_launcher(
    tmp_path: Path, ranks: dict[str, str], intra: int
) -> None:
    # 48 physical cores on the p4d capture: each rank plans its own slice in every command.
    got = answers(tmp_path, isolated_environ(tmp_path, **ranks), "--root", str(P4D))
    assert {counts[0] for counts in got.values()} == {intra}, got
    assert len(set(got.values())) == 1, got


def test_set_is_a_flag_and_beats_hwtune_variables_and_config(tmp_path: Path) -> None:
    root = ("--root", str(P4D))
    environ = isolated_environ(tmp_path, HWTUNE_INTER_OP="1")
    got = answers(tmp_path, environ, *root, "--set", "TF_NUM_INTEROP_THREADS=3")
    assert {counts[1] for counts in got.values()} == {3}, got
    config = tmp_path / "config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[threads]\ninter_op = 2\n")
    environ = isolated_environ(tmp_path)
    assert answers(tmp_path, environ, *root)["plan"][1] == 2
    got = answers(tmp_path, environ, *root, "--set", "TF_NUM_INTEROP_THREADS=1")
    assert {counts[1] for counts in got.values()} == {1}, got
    # HWTUNE_* beats the file; a flag beats both.
    assert answers(tmp_path, {**environ, "HWTUNE_INTER_OP": "4"}, *root)["plan"][1] == 4


def test_a_valid_thread_set_reaches_the_env_files_and_the_config_proto(tmp_path: Path) -> None:
    got = answers(
        tmp_path,
        isolated_environ(tmp_path),
        "--root",
        str(P4D),
        "--set",
        "TF_NUM_INTRAOP_THREADS=7",
    )
    assert {counts[0] for counts in got.values()} == {7}, got


@pytest.mark.parametrize("value", ["abc", "0", "99999999999999999999", "-3", ""])
@pytest.mark.parametrize("command", ["plan", "env", "apply", "explain"])
def test_a_bad_thread_set_is_a_usage_error(tmp_path: Path, command: str, value: str) -> None:
    argv = [command, *(["threads"] if command == "explain" else [])]
    result = run_cli(
        [*argv, "--root", str(P4D), "--set", f"TF_NUM_INTRAOP_THREADS={value}"],
        isolated_environ(tmp_path),
    )
    assert result.exit_status == 2, result.stderr
    assert f"usage: hwtune {command}" in result.stderr
    assert "TF_NUM_INTRAOP_THREADS" in result.stderr and "whole number" in result.stderr


def test_a_bad_thread_count_in_the_config_env_table_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[env]\nTF_NUM_INTRAOP_THREADS = "abc"\n')
    result = run_cli(["plan", "--root", str(P4D)], isolated_environ(tmp_path))
    assert result.exit_status == 1
    assert str(config) in result.stderr and "TF_NUM_INTRAOP_THREADS" in result.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--instances", "0"],
        ["env", "--instances", "0"],
        ["apply", "--instances", "0"],
        ["exec", "--instances", "0", "--", "true"],
        ["verify", "--instance", "-1", "--pid", "1"],
        ["plan", "--tf-version", "two"],
        ["plan", "--no-such-flag"],
        ["env", "--no-such-flag"],
    ],
)
def test_bad_flags_exit_2_with_the_subcommands_usage(tmp_path: Path, argv: list[str]) -> None:
    result = run_cli(argv, isolated_environ(tmp_path))
    assert result.exit_status == 2, result.stderr
    assert f"usage: hwtune {argv[0]}" in result.stderr


@pytest.mark.parametrize("group", ["threads", "tf_data"])
def test_explain_takes_group_names(tmp_path: Path, group: str) -> None:
    result = run_cli(["explain", group, "--root", str(P4D)], isolated_environ(tmp_path))
    assert result.exit_status == 0, result.stderr
    assert result.stdout.startswith(f"{group}.")
    assert result.stdout.count(f"{group}.") >= 2


def test_plan_of_an_empty_root_warns_as_detect_does(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli(["plan", "--root", str(empty)], isolated_environ(tmp_path))
    assert result.exit_status == 0
    assert "warning" in result.stderr and "no CPU source" in result.stderr
    assert f"hwtune detect --root {empty}" in result.stderr


def test_tune_forget_removes_this_machines_results(tmp_path: Path) -> None:
    from hwtune.pipeline.measured import save_result

    environ = isolated_environ(tmp_path)
    fingerprint = json.loads(run_cli(["plan", "--json"], environ).stdout)["fingerprint"]
    record = {"fingerprint": fingerprint, "ratio": 1.2, "settings": {"instances": 1}}
    train = save_result({**record, "workload": "train"}, environ)
    cnn = save_result({**record, "workload": "builtin:cnn"}, environ)
    forgot = run_cli(["tune", "--forget", "train"], environ)
    assert forgot.exit_status == 0 and f"forgot {train}" in forgot.stdout
    assert not train.exists() and cnn.exists()
    again = run_cli(["tune", "--forget", "train"], environ)
    assert again.exit_status == 0 and "nothing measured for workload 'train'" in again.stdout
    every = run_cli(["tune", "--forget"], environ)
    assert f"forgot {cnn}" in every.stdout and not cnn.exists()


def test_tune_workload_names_a_commands_result() -> None:
    from hwtune.errors import ConfigError
    from hwtune.tune.workloads import resolve

    assert resolve("train", ["python", "train.py"]).key == "train"
    assert resolve(None, ["python", "train.py"], name="train").key == "train"
    with pytest.raises(ConfigError, match="either --workload builtin:NAME or a command"):
        resolve("builtin:cnn", ["python", "train.py"])
    with pytest.raises(ConfigError, match="expected builtin:NAME"):
        resolve("train", [])


def test_a_thread_count_set_twice_in_one_config_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[threads]\nintra_op = 2\n[env]\nTF_NUM_INTRAOP_THREADS = "4"\n')
    result = run_cli(["plan", "--root", str(P4D)], isolated_environ(tmp_path))
    assert result.exit_status == 1 and "'threads.intra_op' is also set in [env]" in result.stderr
    config.write_text('workload = ""\n')
    result = run_cli(["plan", "--root", str(P4D)], isolated_environ(tmp_path))
    assert result.exit_status == 1 and "'workload'" in result.stderr
    assert run_cli(["plan", "--workload", ""], isolated_environ(tmp_path)).exit_status == 2


def test_tune_instances_0_is_a_usage_error(tmp_path: Path) -> None:
    result = run_cli(["tune", "--instances", "0", "--dry-run"], isolated_environ(tmp_path))
    assert result.exit_status == 2 and "usage: hwtune tune" in result.stderr
    assert "below the minimum 1" in result.stderr
