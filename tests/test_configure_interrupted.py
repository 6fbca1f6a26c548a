"""configure() in a job interrupted at start (Ctrl-C, a scheduler's SIGINT): real processes,
a real signal delivered at a chosen point, and nothing half-written left behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.apply_profiles import PYTHON
from tests.conftest import REPO, isolated_environ

# Delivers a real SIGINT to the process just before the rename of a temporary file under
# the directory named by argv[1]: the KeyboardInterrupt rises at the point a Ctrl-C at job
# start would, between writing a file and putting it in place.
INTERRUPTED_BEFORE_RENAME = """
import os, signal, sys
real_replace = os.replace
def replace(source, target, *args, **kwargs):
    if os.fspath(source).startswith(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGINT)
    return real_replace(source, target, *args, **kwargs)
os.replace = replace
import hwtune
hwtune.configure(tensorflow=False)
"""


def _interrupted(tmp_path: Path, where: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = isolated_environ(tmp_path, XDG_RUNTIME_DIR=str(tmp_path / "run"), PYTHONPATH=str(REPO))
    (tmp_path / "run").mkdir(mode=0o700)
    directory = Path(env[where]) / "hwtune"
    done = subprocess.run(
        [PYTHON, "-c", INTERRUPTED_BEFORE_RENAME, str(directory)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done, directory


@pytest.mark.parametrize("where", ["XDG_CACHE_HOME", "XDG_RUNTIME_DIR"], ids=["cache", "record"])
def test_ctrl_c_while_a_file_is_written_leaves_no_temporary_file(
    tmp_path: Path, where: str
) -> None:
    """A KeyboardInterrupt between the write and the rename left the temporary file: the cache
    directory is never swept, so each interrupted cold start added one for good; the record's
    stayed until some later process's exit swept it."""
    done, directory = _interrupted(tmp_path, where)
    assert done.returncode != 0
    assert done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr
    assert "During handling" not in done.stderr
    assert sorted(os.listdir(directory)) == []


# A program Ctrl-C ended, with a second SIGINT (Ctrl-C pressed again, a launcher signalling the
# whole process group) delivered while the interpreter runs its atexit handlers: just as
# configure()'s handler lists the runtime directory named by argv[1] for stale records.
INTERRUPTED_AT_EXIT = """
import os, signal, sys
real_listdir = os.listdir
def listdir(path="."):
    if os.fspath(path).startswith(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGINT)
    return real_listdir(path)
os.listdir = listdir
import hwtune
hwtune.configure(tensorflow=False)
raise KeyboardInterrupt
"""


def test_a_second_ctrl_c_at_exit_prints_nothing_of_hwtunes(tmp_path: Path) -> None:
    """The atexit handler that removes configure()'s record printed "Exception ignored in
    atexit callback" and a traceback into hwtune/apply/record.py."""
    env = isolated_environ(tmp_path, XDG_RUNTIME_DIR=str(tmp_path / "run"), PYTHONPATH=str(REPO))
    (tmp_path / "run").mkdir(mode=0o700)
    directory = tmp_path / "run" / "hwtune"
    done = subprocess.run(
        [PYTHON, "-c", INTERRUPTED_AT_EXIT, str(directory)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr
    assert "atexit" not in done.stderr and "hwtune" not in done.stderr, done.stderr
    assert os.listdir(directory) == []  # its own record is still removed
