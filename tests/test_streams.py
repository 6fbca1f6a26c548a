"""hwtune with its stdout or stderr closed, or a stdout that fails (hwtune/fs/streams.py).

Real processes, started by sh with `>&-` / `2>&-`, and /dev/full as a stdout that is full.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import isolated_environ


def _hwtune(
    redirect: str, args: list[str], environ: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`python -m hwtune ARGS REDIRECT` through sh, so the streams are closed as a shell
    closes them; what is left open is captured."""
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "hwtune", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


def test_with_stderr_closed_an_error_never_reaches_stdout_where_eval_runs_it(
    tmp_path: Path,
) -> None:
    """Before: print(file=None) sent the error to stdout, and `eval "$(hwtune env 2>&-)"` ran
    the `$(…)` of the bad value it quotes (in double quotes, as Python quotes a value with
    a `'`)."""
    planted = tmp_path / "planted"
    environ = isolated_environ(tmp_path, HWTUNE_MODE=f"x'$(touch {planted})")
    done = _hwtune("2>&-", ["env"], environ)
    assert done.returncode == 1
    assert done.stdout == ""
    subprocess.run(["sh", "-c", 'eval "$1"', "sh", done.stdout], check=True, timeout=30)
    assert not planted.exists()


def test_with_stderr_closed_a_library_warning_never_reaches_stdout(tmp_path: Path) -> None:
    """The configure cache's warning is printed on sys.stderr by library code, not the CLI:
    with stderr closed it went into `hwtune env`'s stdout, between the variables."""
    environ = isolated_environ(tmp_path)
    cache = tmp_path / "cache" / "hwtune" / "configure-default.json"
    assert _hwtune("", ["env"], environ).returncode == 0  # makes the cache
    os.chmod(cache, 0o666)  # writable by others: ignored with a warning, and rebuilt
    done = _hwtune("2>&-", ["env", "--format", "json"], environ)
    assert done.returncode == 0
    assert "warning" not in done.stdout
    assert "TF_NUM_INTRAOP_THREADS" in json.loads(done.stdout)
    assert os.stat(cache).st_mode & 0o777 == 0o644  # it was refused, so the warning was due


@pytest.mark.parametrize(
    "args", [["env"], ["detect", "--json"], ["plan"], ["schema"], ["apply", "--output", "out"]]
)
@pytest.mark.parametrize(
    ("redirect", "reason"),
    [(">&-", "it is closed"), (">/dev/full", "No space left on device")],
)
def test_a_stdout_that_cannot_be_written_is_an_error_not_a_traceback(
    args: list[str], redirect: str, reason: str, tmp_path: Path
) -> None:
    if redirect == ">/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    args = [a if a != "out" else str(tmp_path / "out") for a in args]
    done = _hwtune(redirect, args, isolated_environ(tmp_path))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"hwtune {args[0]}: error: cannot write to stdout: {reason}" in done.stderr


def test_help_to_a_closed_stdout_is_an_error(tmp_path: Path) -> None:
    done = _hwtune(">&-", ["--help"], isolated_environ(tmp_path))
    assert done.returncode == 1
    assert done.stderr == "hwtune: error: cannot write to stdout: it is closed\n"


def test_a_gone_reader_is_still_no_error(tmp_path: Path) -> None:
    """`hwtune env | true`: EPIPE stays what it was, success without a message."""
    errors = tmp_path / "stderr"
    with errors.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "hwtune", "env"],
            stdout=subprocess.PIPE,
            stderr=sink,
            env=isolated_environ(tmp_path),
        )
        assert process.stdout is not None
        process.stdout.close()  # the reader is gone before hwtune writes
        assert process.wait(timeout=120) == 0
    assert errors.read_text() == ""


@pytest.mark.parametrize("command", [["detect"], ["plan"], ["explain", "jit"]])
def test_a_stdout_encoding_without_the_characters_is_an_error_not_a_traceback(
    command: list[str], tmp_path: Path
) -> None:
    """The human-readable output holds "·", "×", "—": an ASCII stdout could not take them."""
    done = _hwtune("", command, isolated_environ(tmp_path, PYTHONIOENCODING="ascii"))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"hwtune {command[0]}: error: cannot write to stdout: its encoding (ascii)" in (
        done.stderr
    )
    assert "PYTHONIOENCODING=utf-8" in done.stderr
