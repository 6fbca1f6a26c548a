"""HWTUNE_PROFILE: hwtune replaces the values it wrote itself and keeps only the user's."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from hwtune.apply.launch import env_for_instance
from hwtune.apply.marker import (
    LAUNCH_VARIABLES,
    MARKER,
    hwtune_owned,
    marker_value,
    parse,
    replace_own,
)
from hwtune.apply.render import ENV_FILES, env_map, render_env
from hwtune.models.hardware import Gpu, Hardware
from hwtune.pipeline.request import PlanRequest, profile_for
from tests.apply_profiles import PYTHON, make_profile
from tests.conftest import needs_two_cores
from tests.gpu_roots import t4_under_cuda_11

HWTUNE = f"{PYTHON} -m hwtune"
SHOW = (
    "import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith(('TF_NUM_', 'HWTUNE_'))}))"
)


def _environ(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "OMP_", "KMP_"))
        and k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    return env


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -e; {script}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_owned_values_are_replaced_and_the_users_kept() -> None:
    mine = {"A": "1", "B": "x y", "GONE": "old"}
    base = {**mine, MARKER: marker_value(mine), "USER": "u"}
    base["B"] = "edited by the user"
    assert hwtune_owned(base) == {"A", "GONE"}
    env, kept = replace_own(base, {"A": "2", "B": "planned", "USER": "p", "NEW": "n"})
    assert env["A"] == "2" and env["NEW"] == "n"
    assert "GONE" not in env  # hwtune's earlier value the new plan does not set
    assert kept == {"B": ("edited by the user", "planned"), "USER": ("u", "p")}
    assert hwtune_owned(env) == {"A", "NEW"}
    assert parse("garbage") == {} and parse(None) == {} and parse("2:A=00000000") == {}


@pytest.mark.parametrize("name", sorted(ENV_FILES))
def test_every_env_file_marks_its_values(name: str, tmp_path: Path) -> None:
    profile = make_profile()
    fmt = ENV_FILES[name]
    path = tmp_path / name
    path.write_text(render_env(profile, fmt))
    if fmt == "json":
        assert MARKER not in json.loads(path.read_text())  # not an environment file
        return
    if fmt == "dotenv":  # docker's reader: NAME=VALUE lines, verbatim
        lines = [line for line in path.read_text().splitlines() if line and line[0] != "#"]
        loaded = dict(line.split("=", 1) for line in lines)
    else:  # hwtune.env (systemd) is valid POSIX sh with the same meaning
        out = _bash(f'set -a; . {path}; {PYTHON} -c "{SHOW.replace("TF_NUM_", "")}"', {})
        loaded = json.loads(out.stdout)
    assert hwtune_owned(loaded) == set(env_map(profile))


@needs_two_cores
def test_exec_after_eval_env_gives_each_instance_its_own_threads(tmp_path: Path) -> None:
    """`eval "$(hwtune env)"` then `hwtune exec --instances 2`: the node's thread counts are
    hwtune's own, so each instance gets its slice's counts, with no "keeping" warning."""
    env = _environ(tmp_path)
    result = _bash(
        f'eval "$({HWTUNE} env)"; {HWTUNE} exec --instances 2 -- {PYTHON} -c "{SHOW}"', env
    )
    assert result.returncode == 0, result.stderr
    assert "keeping" not in result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        index, _, text = line.partition("] ")
        seen[int(index.strip("["))] = json.loads(text)
    for index in (0, 1):
        planned = env_map(
            profile_for(PlanRequest(environ=env, instances=2, instance=index)).profile
        )
        for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            assert seen[index][name] == planned[name], (index, name)
        assert hwtune_owned(seen[index]) >= {"TF_NUM_INTRAOP_THREADS", "HWTUNE_INSTANCE"}


@needs_two_cores
def test_a_value_the_user_changed_after_eval_is_kept(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    result = _bash(
        f'eval "$({HWTUNE} env)"; export TF_NUM_INTRAOP_THREADS=7; '
        f'{HWTUNE} exec --instances 2 -- {PYTHON} -c "{SHOW}"',
        env,
    )
    assert result.returncode == 0, result.stderr
    assert "keeping TF_NUM_INTRAOP_THREADS='7'" in result.stderr
    for line in result.stdout.splitlines():
        assert json.loads(line.partition("] ")[2])["TF_NUM_INTRAOP_THREADS"] == "7"


@needs_two_cores
def test_configure_replaces_values_an_earlier_hwtune_env_wrote(tmp_path: Path) -> None:
    env = _environ(tmp_path)
    probe = (
        "import hwtune, json, os; r = hwtune.configure(tensorflow=False); "
        "print(json.dumps([r.as_dict(), dict(os.environ)]))"
    )
    result = _bash(
        f'eval "$({HWTUNE} env --instances 2 --instance 1)"; {PYTHON} -c "{probe}"', env
    )
    assert result.returncode == 0, result.stderr
    report, after = json.loads(result.stdout.splitlines()[-1])
    planned = env_map(profile_for(PlanRequest(environ=env)).profile)
    assert report["env_user"] == {}
    for name, value in planned.items():
        assert after[name] == value
    assert hwtune_owned(after) == set(planned)


SHOW_ALL = "import os, json; print(json.dumps(dict(os.environ)))"


@pytest.mark.parametrize("gpu", [False, True], ids=["this-host", "t4-gpu-capture"])
def test_env_in_a_shell_keeps_the_users_value_and_unsets_what_it_no_longer_sets(
    tmp_path: Path, gpu: bool
) -> None:
    """`hwtune env` is evaluated into the caller's shell: a value the user exported after an
    earlier eval survives the next eval, and a variable only the earlier plan set (XLA for a
    dense model) is unset when the next plan (a CNN: XLA off) no longer sets it.

    Where the dense plan turns XLA off too (one intra-op thread on oneDNN's AVX-512 kernels:
    planner/accel.py, jit_rule), `--set` puts TF_XLA_FLAGS in the first plan instead, so the
    unset is checked on every machine; the first eval must give what that plan says.

    The whole environment is read back, not only TF_*: a GPU plan owns CUDA_DEVICE_ORDER too
    (on an H200, a TF_-only read missed it). The T4 capture (TensorFlow 2.14, CUDA 11) has
    every machine check a GPU plan; a variable the inherited environment already holds with
    another value (a CUDA image's own CUDA_DEVICE_ORDER, say) is the user's, kept, not owned."""
    env = _environ(tmp_path)
    root = str(t4_under_cuda_11(tmp_path)) if gpu else "/"
    where = f" --root {root}" if gpu else ""
    dense = env_map(profile_for(PlanRequest(environ=env, model="dense", root=root)).profile)
    conv = env_map(profile_for(PlanRequest(environ=env, model="conv", root=root)).profile)
    assert "TF_XLA_FLAGS" not in conv
    if gpu:
        assert conv["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    xla = dense.get("TF_XLA_FLAGS") or "--tf_xla_auto_jit=2"
    first = "--model dense" + ("" if "TF_XLA_FLAGS" in dense else f" --set TF_XLA_FLAGS={xla}")
    result = _bash(
        f'eval "$({HWTUNE} env{where} {first})"; test "$TF_XLA_FLAGS" = {shlex.quote(xla)}; '
        "export TF_NUM_INTRAOP_THREADS=7; "
        f'eval "$({HWTUNE} env{where} --model conv)"; '
        f'{PYTHON} -c "{SHOW_ALL}"',
        env,
    )
    assert result.returncode == 0, result.stderr
    after = json.loads(result.stdout)
    assert after["TF_NUM_INTRAOP_THREADS"] == "7"
    assert "TF_XLA_FLAGS" not in after
    users = {name for name in conv if name in env and env[name] != conv[name]}
    assert {name: after[name] for name in users} == {name: env[name] for name in users}
    assert hwtune_owned(after) == set(conv) - {"TF_NUM_INTRAOP_THREADS"} - users
    assert {name: after[name] for name in hwtune_owned(after)} == {
        name: conv[name] for name in hwtune_owned(after)
    }


def test_env_files_for_other_processes_hold_the_plan_alone(tmp_path: Path) -> None:
    """The systemd and dotenv formats are read by a unit or a container, not this shell: the
    caller's own value does not change them."""
    env = {**_environ(tmp_path), "TF_NUM_INTRAOP_THREADS": "7"}
    out = subprocess.run(
        [*HWTUNE.split(), "env", "--format", "dotenv"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    planned = env_map(profile_for(PlanRequest(environ=env)).profile)
    assert f"TF_NUM_INTRAOP_THREADS={planned['TF_NUM_INTRAOP_THREADS']}" in out.splitlines()


@needs_two_cores
def test_env_in_an_instance_of_exec_keeps_the_instance_and_unsets_stale_plan_variables(
    tmp_path: Path,
) -> None:
    """`eval "$(hwtune env)"` inside a copy of `hwtune exec --instances 2`. Before: exec's
    HWTUNE_INSTANCE(S) are listed in the marker and no plan sets them, so the eval unset them
    and the copy no longer knew which one it was. A variable an earlier eval's plan set (here
    OMP_NUM_THREADS, through --set) is still unset when the next plan drops it."""
    script = (
        f'set -e; eval "$({HWTUNE} env)"; '
        f'eval "$({HWTUNE} env --set OMP_NUM_THREADS=3)"; test "$OMP_NUM_THREADS" = 3; '
        f'eval "$({HWTUNE} env)"; '
        'echo "$HWTUNE_INSTANCE/$HWTUNE_INSTANCES ${OMP_NUM_THREADS-unset}"'
    )
    result = subprocess.run(
        [*HWTUNE.split(), "exec", "--instances", "2", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=_environ(tmp_path),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] 0/2 unset", "[1] 1/2 unset"]


def _left_after(
    exported: dict[str, str], planned: dict[str, str], *, inside: bool
) -> dict[str, str]:
    """What a new plan (`planned`) leaves of the launch variables an earlier hwtune `exported`:
    in a copy of `hwtune exec` all of exec's, outside an instance none; in both, the plan's
    value where the plan sets the variable itself (a GPU host's plan sets CUDA_DEVICE_ORDER)."""
    return {n: planned.get(n, v) for n, v in exported.items() if inside or n in planned}


@pytest.mark.parametrize("gpu", [False, True], ids=["this-host", "t4-gpu-capture"])
def test_env_unsets_a_stale_gpu_list_only_outside_an_instance_of_exec(
    tmp_path: Path, gpu: bool
) -> None:
    """Exec's GPU variables are the instance's own: `hwtune env` in it leaves them, though its
    plan need not set them. Outside an instance only an earlier plan can have set them (`env
    --instances 2 --instance 1` on a GPU node), and they are stale unless the new plan sets
    them too (expected from the plan for the same environment, on this host and on the T4
    capture's GPU plan). Only these two are compared: a CUDA image's CUDA_HOME and
    CUDA_VERSION are inherited, no plan's, and hwtune leaves them alone."""
    root = str(t4_under_cuda_11(tmp_path)) if gpu else "/"
    where = f" --root {root}" if gpu else ""
    gpus = {"CUDA_VISIBLE_DEVICES": "GPU-aaa", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    instance = {"HWTUNE_INSTANCE": "0", "HWTUNE_INSTANCES": "1", **gpus}
    show = f'{PYTHON} -c "{SHOW.replace("TF_NUM_", "CUDA_")}"'
    for exported in (instance, gpus):
        env = {**_environ(tmp_path), **exported, MARKER: marker_value(exported)}
        planned = env_map(profile_for(PlanRequest(environ=env, root=root)).profile)
        if gpu:
            assert planned["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        result = _bash(f'eval "$({HWTUNE} env{where})"; {show}', env)
        assert result.returncode == 0, result.stderr
        after = json.loads(result.stdout)
        assert {k: after[k] for k in gpus if k in after} == _left_after(
            gpus, planned, inside=exported is instance
        )
        assert {k: after.get(k) for k in ("HWTUNE_INSTANCE", "HWTUNE_INSTANCES")} == {
            k: exported.get(k) for k in ("HWTUNE_INSTANCE", "HWTUNE_INSTANCES")
        }


def test_what_exec_adds_to_the_plan_is_a_launch_variable() -> None:
    """`hwtune env` spares LAUNCH_VARIABLES in an instance: every variable exec sets beyond
    the plan must be one, GPUs by UUID, by index, and none for a CPU-only instance."""
    profile = make_profile(instances=((0,), (1,), (2,)), gpus=((0,), (1,), ()))
    hw = Hardware(gpus=(Gpu(0, "A100", uuid="GPU-aaa"), Gpu(1, "A100", uuid="GPU-bbb")))
    planned = set(env_map(profile))
    for index in range(3):
        for known in (hw, None):
            added = set(env_for_instance(profile, index, hardware=known)) - planned
            assert "HWTUNE_INSTANCE" in added and added <= LAUNCH_VARIABLES, (index, added)


CONFIGURE_AND_SHOW = (
    "import hwtune, json, os; hwtune.configure(tensorflow=False); "
    "print(json.dumps(dict(os.environ)))"
)


def test_configure_in_an_instance_of_exec_keeps_its_launch_variables(tmp_path: Path) -> None:
    """configure() takes `hwtune env`'s rule (marker.stale). Before, it dropped every variable
    of the marker its plan did not set, so in a copy of `hwtune exec` it unset HWTUNE_INSTANCE(S)
    and the GPU list exec gave the copy. A stale plan variable (OMP_NUM_THREADS, from an
    earlier plan) is still removed, and outside an instance a stale GPU list is too, unless
    the new plan sets the variable itself (a GPU host's plan sets CUDA_DEVICE_ORDER): what is
    left is expected from the plan for the same environment."""
    gpus = {"CUDA_VISIBLE_DEVICES": "GPU-aaa", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    instance = {"HWTUNE_INSTANCE": "0", "HWTUNE_INSTANCES": "1", **gpus}
    for exported in (instance, gpus):
        written = {**exported, "OMP_NUM_THREADS": "3"}
        env = {**_environ(tmp_path), **written, MARKER: marker_value(written)}
        planned = env_map(profile_for(PlanRequest(environ=env)).profile)
        kept = _left_after(exported, planned, inside=exported is instance)
        result = _bash(f'{PYTHON} -c "{CONFIGURE_AND_SHOW}"', env)
        assert result.returncode == 0, result.stderr
        after = json.loads(result.stdout)
        assert {k: after.get(k) for k in exported} == {k: kept.get(k) for k in exported}
        assert after.get("OMP_NUM_THREADS") == planned.get("OMP_NUM_THREADS")
        assert hwtune_owned(after) >= set(kept)  # the new marker still names exec's variables


@needs_two_cores
def test_an_instance_of_exec_stays_marked_through_evals_and_configure(tmp_path: Path) -> None:
    """Before, the marker `eval "$(hwtune env)"` wrote named the plan's variables only: after
    one eval, exec's HWTUNE_INSTANCE(S) read as the user's. Two evals and a configure() later,
    each copy still knows its index and the marker still names it as exec's."""
    show = f'{PYTHON} -c "{CONFIGURE_AND_SHOW}"'
    script = f'eval "$({HWTUNE} env)"; eval "$({HWTUNE} env)"; {show}'
    result = subprocess.run(
        [*HWTUNE.split(), "exec", "--instances", "2", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=_environ(tmp_path),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        index, _, text = line.partition("] ")
        after = json.loads(text)
        assert (after["HWTUNE_INSTANCE"], after["HWTUNE_INSTANCES"]) == (index.strip("["), "2")
        assert hwtune_owned(after) >= {"HWTUNE_INSTANCE", "HWTUNE_INSTANCES"}
