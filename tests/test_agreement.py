"""The agreement property: for any captured machine, launcher rank variables, config file,
HWTUNE_* variables and flags, `hwtune plan --json`, `hwtune env --format json`, `hwtune
apply`'s profile.json/hwtune.json and `hwtune.configure()`'s report say the same thing, because
they all plan through `hwtune.pipeline.request.profile_for`. Commands run in-process
(`hwtune.cli.main`) for speed; one case runs the real `hwtune` as a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwtune.apply.render import env_map
from hwtune.models.convert import load
from hwtune.models.profile import Profile
from tests.conftest import DATA, run_cli

HOSTS = sorted(p for p in (DATA / "hosts").iterdir() if p.is_dir())
_OUTSIDE = ("HWTUNE_", "SLURM_", "OMPI_", "MV2_", "PMI_", "PALS_", "MPI_", "LOCAL_", "TF_", "OMP_")
# Bounded so that the whole file runs in well under a minute on a loaded 2-vCPU machine.
AGREEMENT = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def ranks(draw: st.DrawFn) -> dict[str, str]:
    size = draw(st.integers(1, 4))
    rank = str(draw(st.integers(0, size - 1)))
    return draw(
        st.sampled_from(
            [
                {},
                {"LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": str(size)},
                {"SLURM_LOCALID": rank, "SLURM_NTASKS_PER_NODE": str(size), "SLURM_STEP_ID": "0"},
                {"OMPI_COMM_WORLD_LOCAL_RANK": rank, "OMPI_COMM_WORLD_LOCAL_SIZE": str(size)},
            ]
        )
    )


counts = st.integers(1, 6)
modes = st.sampled_from(["throughput", "latency"])


@st.composite
def config_text(draw: st.DrawFn) -> str:
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append(f'mode = "{draw(modes)}"')
    if draw(st.booleans()):
        lines.append(f'model = "{draw(st.sampled_from(["unknown", "dense", "conv"]))}"')
    if draw(st.booleans()):
        lines.append(f'jit = "{draw(st.sampled_from(["off", "autoclustering"]))}"')
    threads = {k: draw(counts) for k in ("intra_op", "inter_op") if draw(st.booleans())}
    if threads:
        lines += ["[threads]", *(f"{k} = {v}" for k, v in threads.items())]
    if draw(st.booleans()):
        lines += ["[env]", 'TF_CPP_MIN_LOG_LEVEL = "2"']
    return "\n".join(lines) + "\n"


@st.composite
def hwtune_variables(draw: st.DrawFn) -> dict[str, str]:
    found: dict[str, str] = {}
    if draw(st.booleans()):
        found["HWTUNE_MODE"] = draw(modes)
    if draw(st.booleans()):
        found["HWTUNE_INTER_OP"] = str(draw(counts))
    if draw(st.booleans()):
        found["HWTUNE_INTRA_OP"] = str(draw(counts))
    return found


@st.composite
def flags(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    if draw(st.booleans()):
        argv += ["--mode", draw(modes)]
    if draw(st.booleans()):
        argv += ["--set", f"TF_NUM_INTEROP_THREADS={draw(counts)}"]
    if draw(st.booleans()):
        argv += ["--set", f"TF_NUM_INTRAOP_THREADS={draw(counts)}"]
    if draw(st.booleans()):
        argv += ["--set", "KMP_BLOCKTIME=0"]
    if draw(st.booleans()):
        argv += ["--precision", draw(st.sampled_from(["off", "eligible", "auto"]))]
    return argv


def environment(tmp: Path, config: str, extra: dict[str, str]) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_OUTSIDE)}
    (tmp / "config" / "hwtune").mkdir(parents=True, exist_ok=True)
    (tmp / "config" / "hwtune" / "config.toml").write_text(config)
    environ.update(
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_CACHE_HOME=str(tmp / "cache"),
        HWTUNE_TUNED_DIR=str(tmp / "tuned"),
        **extra,
    )
    return environ


def agree(tmp: Path, environ: dict[str, str], argv: list[str]) -> dict[str, Any] | None:
    """Run plan, env and apply; assert they agree; the plan's JSON (None when all refused)."""
    plan = run_cli(["plan", "--json", *argv], environ)
    env = run_cli(["env", "--format", "json", *argv], environ)
    out = tmp / "out"
    apply = run_cli(["apply", "--output", str(out), *argv], environ)
    if plan.exit_status != 0:
        # An impossible request (more ranks than cores) is refused alike, with one message.
        assert env.exit_status == apply.exit_status == plan.exit_status == 1, env.stderr
        error = plan.stderr.splitlines()[-2 if "hint:" in plan.stderr else -1]
        assert error.split(": error: ")[1] in env.stderr and error.split(": error: ")[1] in (
            apply.stderr
        )
        return None
    assert env.exit_status == 0 and apply.exit_status == 0, (env.stderr, apply.stderr)
    planned = json.loads(plan.stdout)
    assert json.loads((out / "profile.json").read_text()) == planned
    variables = env_map(load(Profile, planned))
    assert json.loads(env.stdout) == variables
    assert json.loads((out / "hwtune.json").read_text()) == variables
    threads = planned["threads"]
    pbtxt = (out / "tf_config.pbtxt").read_text()
    assert f"intra_op_parallelism_threads: {threads['intra_op']['value']}" in pbtxt
    assert f"inter_op_parallelism_threads: {threads['inter_op']['value']}" in pbtxt
    return planned  # type: ignore[no-any-return]


@AGREEMENT
@given(
    root=st.sampled_from(HOSTS),
    rank=ranks(),
    config=config_text(),
    variables=hwtune_variables(),
    argv=flags(),
)
def test_commands_agree_on_captured_machines(
    root: Path, rank: dict[str, str], config: str, variables: dict[str, str], argv: list[str]
) -> None:
    with TemporaryDirectory() as name:
        tmp = Path(name)
        environ = environment(tmp, config, {**rank, **variables})
        planned = agree(tmp, environ, ["--root", str(root), *argv])
    wanted = [a.split("=")[1] for a in argv if a.startswith("TF_NUM_INTEROP_THREADS=")]
    if planned is not None and wanted:  # a flag beats config, HWTUNE_* and the rules
        assert planned["threads"]["inter_op"]["value"] == int(wanted[0])


@settings(AGREEMENT, max_examples=8)
@given(rank=ranks(), config=config_text(), variables=hwtune_variables())
def test_configure_agrees_with_plan_on_this_machine(
    rank: dict[str, str], config: str, variables: dict[str, str]
) -> None:
    import hwtune

    with TemporaryDirectory() as name:
        tmp = Path(name)
        environ = environment(tmp, config, {**rank, **variables})
        planned = agree(tmp, environ, [])
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(environ)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = hwtune.configure(tensorflow=False, use_cache=False)
            report.restore()
        finally:
            os.environ.clear()
            os.environ.update(saved)
    if planned is None:  # refused: configure() warns and changes nothing
        assert report.env == {} and "could not plan a profile" in str(caught[0].message)
        return
    assert report.env == env_map(load(Profile, planned))
    assert report.intra_op == planned["threads"]["intra_op"]["value"]
    assert report.inter_op == planned["threads"]["inter_op"]["value"]
    assert report.jit == planned["jit"]["level"]["value"]


def test_the_real_command_agrees_with_the_in_process_one(tmp_path: Path) -> None:
    root = DATA / "hosts" / "epyc7451-p4d-8xa100-gpu"
    environ = environment(
        tmp_path,
        "[threads]\ninter_op = 2\n",
        {"SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "4", "SLURM_STEP_ID": "0"},
    )
    argv = ["--root", str(root), "--set", "TF_NUM_INTEROP_THREADS=3"]
    planned = agree(tmp_path, environ, argv)
    real = subprocess.run(
        [sys.executable, "-m", "hwtune", "plan", "--json", *argv],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(real.stdout) == planned
    assert planned is not None and planned["threads"]["intra_op"]["value"] == 12
    assert planned["threads"]["inter_op"]["value"] == 3
