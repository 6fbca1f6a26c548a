"""What a new user's walkthrough found, end to end: real `python -m hwtune` subprocesses, real
files, the messages a user reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No HWTUNE_* from the caller, a private config and state; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWTUNE_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def hwtune(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwtune", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_tf_version_errors_name_their_source(tmp_path: Path) -> None:
    config = tmp_path / "xdg-config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('tf_version = "2.99"\n')
    result = hwtune("plan", env=environ(tmp_path))
    assert result.returncode == 1
    assert f"{config}: 'tf_version' = \"2.99\": hwtune knows TensorFlow" in result.stderr
    assert "--tf-version" not in result.stderr
    assert "hint: did you mean 2.21?" in result.stderr  # numerically nearest, not 2.19

    config.unlink()
    result = hwtune("plan", env=environ(tmp_path, HWTUNE_TF_VERSION="2.14"))
    assert result.returncode == 1
    assert "HWTUNE_TF_VERSION=2.14: hwtune knows TensorFlow" in result.stderr
    assert "--tf-version" not in result.stderr
    assert "hint: did you mean 2.15?" in result.stderr

    result = hwtune("plan", "--tf-version", "2.99", env=environ(tmp_path))
    assert "--tf-version 2.99: hwtune knows TensorFlow" in result.stderr

    result = hwtune("explain", "bazel.tf_version", env=environ(tmp_path, HWTUNE_TF_VERSION="2.19"))
    assert result.returncode == 0, result.stderr
    assert "TensorFlow 2.19, as asked (HWTUNE_TF_VERSION)" in result.stdout
    config.write_text('tf_version = "2.18"\n')
    result = hwtune("explain", "bazel.tf_version", env=environ(tmp_path))
    assert f"TensorFlow 2.18, as asked ('tf_version' in {config})" in result.stdout
