"""A TF_NUM_INTRAOP_THREADS that TensorFlow aborts on (a negative count) is replaced by the
plan's value, with a note, by configure(), `hwtune exec` and `hwtune env`: kept as "the
user's", it killed the job with SIGABRT at TensorFlow's first op. Real processes, and a
real TensorFlow where it is installed."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from hwtune.apply.marker import fatal_to_tensorflow
from tests.apply_profiles import PYTHON
from tests.test_runtime import needs_tf

HWTUNE = [PYTHON, "-m", "hwtune"]
INTRA = "TF_NUM_INTRAOP_THREADS"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "KMP_", "OMP_"))
    }
    env.pop("LOCAL_RANK", None)
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_RUNTIME_DIR=str(tmp_path),
        **extra,
    )
    return env


@pytest.mark.parametrize(
    ("value", "fatal"),
    [
        ("-1", True),
        (" -3\n", True),  # safe_strto32 skips surrounding white space
        ("\t-2147483648", True),  # INT32_MIN
        ("-2147483649", False),  # out of int32: read as 0, TensorFlow's default
        ("-0", False),
        ("- 1", False),
        ("-1x", False),
        ("junk", False),
        ("0", False),
        ("4", False),
    ],
)
def test_which_values_tensorflow_aborts_on(value: str, fatal: bool) -> None:
    assert (fatal_to_tensorflow(INTRA, value) is not None) == fatal
    assert fatal_to_tensorflow("TF_NUM_INTEROP_THREADS", value) is None  # negative: valid


def test_configure_replaces_a_negative_intra_op_count_and_says_so(tmp_path: Path) -> None:
    code = (
        "import os, warnings; warnings.simplefilter('always'); import hwtune; "
        "r = hwtune.configure(tensorflow=False); "
        f"print(os.environ['{INTRA}'], r.intra_op, '{INTRA}' in r.env_user)"
    )
    done = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        env=_env(tmp_path, **{INTRA: "-1"}),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    value, planned, kept = done.stdout.split()
    assert value == planned and kept == "False", done.stdout
    assert f"RuntimeWarning: hwtune.configure: replacing {INTRA}='-1'" in done.stderr


@needs_tf
def test_a_job_with_a_negative_intra_op_count_survives_configure(tmp_path: Path) -> None:
    """Without configure() TensorFlow aborts on it ("Check failed: num_threads >= 1")."""
    code = (
        "import hwtune; hwtune.configure(); import tensorflow as tf; "
        "print(int(tf.constant(1) + 1))"
    )
    done = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        env=_env(tmp_path, **{INTRA: "-1"}),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "2"


@pytest.mark.parametrize("instances", ["1", "2"])
def test_exec_replaces_a_negative_intra_op_count(tmp_path: Path, instances: str) -> None:
    code = f"import os; print(os.environ['{INTRA}'])"
    done = subprocess.run(
        [*HWTUNE, "exec", "--instances", instances, "--no-prefix", "--", PYTHON, "-c", code],
        capture_output=True,
        text=True,
        env=_env(tmp_path, **{INTRA: "-1"}),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = done.stdout.split()
    assert len(seen) == int(instances) and all(int(v) >= 1 for v in seen), done.stdout
    assert f"replacing {INTRA}='-1' from the environment" in done.stderr


def test_env_exports_the_plan_over_a_negative_intra_op_count(tmp_path: Path) -> None:
    env = _env(tmp_path, **{INTRA: "-1"})
    text = subprocess.run(
        [*HWTUNE, "env"], capture_output=True, text=True, env=env, timeout=120, check=True
    ).stdout
    shell = f"eval {shlex.quote(text)}; printf '%s' \"${INTRA}\""
    value = subprocess.run(
        ["sh", "-c", shell], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert int(value) >= 1, text
    assert f"# replacing {INTRA}='-1' from the environment" in text
