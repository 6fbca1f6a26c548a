"""configure() as root beside other users: its cache and records in shared directories.

Real directories, links and owners: the other user is `nobody`, acting through `setpriv`
(util-linux) with its own uid, so what it makes is its own as on a real machine. Runs as root
(the refusals are root's) and skips otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import isolated_environ

NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="acting as another user needs root and setpriv",
)

# Two configure() calls in one process: the second must not repeat the first one's note.
PROBE = (
    "import hwtune, json; first = hwtune.configure(tensorflow=False); "
    "second = hwtune.configure(tensorflow=False); print(json.dumps([first.notes, second.notes]))"
)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A shared directory like /tmp (1777), for nobody to make things in (pytest's own
    tmp_path is root's alone, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="hwtune-shared-test-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_nobody(*command: str | Path) -> None:
    subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        + [str(part) for part in command],
        check=True,
        timeout=30,
    )


def configure_as_root(environ: dict[str, str]) -> tuple[list[str], str]:
    """(the notes of the first of two configure() calls in one process, stderr); the second
    call's notes must not repeat what the first said."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=180,
        env=environ,
        check=True,
    )
    first, second = json.loads(done.stdout)
    assert not set(second) - set(first), (first, second)
    return first, done.stderr


def _shared(scratch: Path, layout: str, victim: Path) -> Path:
    """$XDG_CACHE_HOME as another user left it: `hwtune` in it leads where they chose."""
    shared = scratch / "shared"
    if layout == "their-directory":
        as_nobody("mkdir", shared)  # `mkdir /tmp/shared` by the other user
    else:
        shared.mkdir()
        shared.chmod(0o1777 if layout.startswith("sticky") else 0o777)
    if layout == "sticky-their-hwtune":
        as_nobody("mkdir", shared / "hwtune")
    else:
        as_nobody("ln", "-s", victim, shared / "hwtune")
    return shared


@needs_root
@pytest.mark.parametrize(
    ("layout", "why"),
    [
        ("sticky", "hwtune in it belongs to nobody (uid 65534)"),
        ("their-directory", "shared in it belongs to nobody (uid 65534)"),
        ("writable-by-all", "it is writable by everyone (mode 0777)"),
        ("sticky-their-hwtune", "hwtune in it belongs to nobody (uid 65534)"),
    ],
)
def test_roots_cache_is_not_written_where_another_user_points(
    scratch: Path, tmp_path: Path, layout: str, why: str
) -> None:
    """Before: `ln -s DIR /tmp/shared/hwtune` by another user had root's configure() write
    its configure-*.json into DIR (any directory they chose)."""
    victim = scratch / "victim"
    victim.mkdir()
    shared = _shared(scratch, layout, victim)
    notes, stderr = configure_as_root(isolated_environ(tmp_path, XDG_CACHE_HOME=str(shared)))
    assert list(victim.iterdir()) == []
    if layout == "sticky-their-hwtune":
        assert list((shared / "hwtune").iterdir()) == []
    said = [n for n in notes if n.startswith("the configure cache was not written: ")]
    assert len(said) == 1 and why in said[0] and str(shared) in said[0], notes
    assert stderr.count("the configure cache was not written") == 1, stderr


@needs_root
def test_roots_cache_in_a_private_directory_is_still_written(tmp_path: Path) -> None:
    notes, stderr = configure_as_root(isolated_environ(tmp_path))
    assert list((tmp_path / "cache" / "hwtune").glob("configure-*.json"))
    assert "not written" not in stderr and not any("not written" in n for n in notes)


def _private_mounts() -> bool:
    """Whether this process may make mounts of its own (`unshare -m`: a mount namespace that
    ends with the command, so no mount outlives a test)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=30)
    return done.returncode == 0


# $1 is bound onto itself read-only, in a mount namespace of its own, then the probe runs.
READ_ONLY_RUN = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && exec "$2" -c "$3"'


def test_a_read_only_cache_directory_is_noted_once_per_process(tmp_path: Path) -> None:
    """Before: a cache directory that could not be written (a read-only mount) was passed over
    in silence, and every start planned afresh with nothing to say why it was slow."""
    if not _private_mounts():
        pytest.skip("needs root and `unshare -m` for a read-only mount of its own")
    cache = tmp_path / "cache" / "hwtune"
    cache.mkdir(parents=True, mode=0o700)
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", READ_ONLY_RUN, "sh", str(cache), sys.executable, PROBE],
        capture_output=True,
        text=True,
        timeout=180,
        env=isolated_environ(tmp_path),
        check=True,
    )
    first, second = json.loads(done.stdout)
    said = [n for n in first if n.startswith("the configure cache was not written: ")]
    assert said == [
        f"the configure cache was not written: cannot write in {cache}: Read-only file system; "
        "every start plans the profile afresh until it can"
    ], first
    assert not set(second) - set(first), second
    assert done.stderr.count("the configure cache was not written") == 1, done.stderr
    assert list(cache.iterdir()) == []


# Two configure() calls, then waits to be verified; its stderr goes to a file for the test.
JOB = (
    "import hwtune, time; hwtune.configure(tensorflow=False); hwtune.configure(tensorflow=False); "
    "print('up', flush=True); time.sleep(120)"
)


@needs_root
@pytest.mark.parametrize("planted", ["directory", "link"])
def test_a_runtime_directory_another_user_made_is_refused_and_said(
    scratch: Path, tmp_path: Path, planted: str
) -> None:
    """Without XDG_RUNTIME_DIR, another user's <tmp>/hwtune-0 (a directory, or a link to
    theirs) silently stopped root's configure() records: verify then said nothing of why it
    saw none. It is still refused; configure() says so once, and verify gives the reason."""
    runtime = scratch / "hwtune-0"
    theirs = scratch / "theirs"
    as_nobody("mkdir", theirs)
    if planted == "directory":
        as_nobody("mkdir", runtime)
        what = "owned by nobody (uid 65534), not root (uid 0)"
    else:
        as_nobody("ln", "-s", theirs, runtime)
        what = "a symbolic link owned by nobody (uid 65534)"
    environ = isolated_environ(tmp_path, TMPDIR=str(scratch))
    said = f"{runtime} is {what}, so configure() keeps no records there for `hwtune verify`"
    with (tmp_path / "job.err").open("w+") as errors:
        job = subprocess.Popen(
            [sys.executable, "-c", JOB],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert job.stdout is not None and job.stdout.readline() == "up\n"
            verify = subprocess.run(
                [sys.executable, "-m", "hwtune", "verify", "--pid", str(job.pid)],
                capture_output=True,
                text=True,
                env=environ,
                timeout=120,
            )
        finally:
            job.kill()
            job.wait()
        errors.seek(0)
        stderr = errors.read()
    assert stderr.count(said) == 1, stderr
    assert list(runtime.iterdir()) == [] and list(theirs.iterdir()) == []
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"configure()'s record could not be used: {said}" in verify.stdout, verify.stdout
