"""`hwtune exec --instances N` relaying output to streams that fail, block or are closed:
real processes, real pipes, real devices."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hwtune.apply.launch import InstanceSpec
from hwtune.apply.launcher import Launcher
from tests.apply_profiles import PYTHON
from tests.test_exec import _env

HWTUNE = [PYTHON, "-m", "hwtune"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (ENOSPC on write)")
def test_a_stdout_that_fails_with_enospc_drops_output_and_the_instances_run_on(
    tmp_path: Path,
) -> None:
    """`hwtune exec --instances 2 -- CMD > /dev/full` (a full log disk): the ENOSPC was a
    traceback, exit 1, and every instance SIGKILLed by PR_SET_PDEATHSIG as hwtune died; then
    the instances' stdout pipes were closed, and their next write to it killed them (SIGPIPE)."""
    script = (
        "echo start\n"
        "sleep 1\n"
        "echo more output\n"  # after the failure: a closed pipe would kill the instance here
        'echo "still alive $HWTUNE_INSTANCE" >&2\n'
        f"touch {tmp_path}/done.$HWTUNE_INSTANCE\n"
    )
    with open("/dev/full", "wb") as full:
        result = subprocess.run(
            [*HWTUNE, "exec", "--instances", "2", "--", "sh", "-c", script],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tmp_path),
            timeout=120,
        )
    err = result.stderr
    assert result.returncode == 0, err
    assert "Traceback" not in err
    assert err.count("cannot write to its stdout (No space left on device [ENOSPC])") == 1, err
    assert "the instances run on" in err
    assert "[0] still alive 0" in err.splitlines() and "[1] still alive 1" in err.splitlines()
    assert sorted(p.name for p in tmp_path.glob("done.*")) == ["done.0", "done.1"]


class _FailingRelay(Launcher):
    """A Launcher whose relay loop fails (a bug, a MemoryError) once every instance said it
    is up (its trap is set)."""

    up = 0

    def _emit(
        self, index: int, fd_number: int, partial: dict[tuple[int, int], bytes], chunk: bytes
    ) -> None:
        self.up += chunk.count(b"up\n")
        super()._emit(index, fd_number, partial, chunk)

    def _reap(self, exited_at: dict[int, float]) -> None:
        if self.up == len(self.specs):
            raise RuntimeError("relay failed")
        super()._reap(exited_at)


def test_a_failing_relay_loop_stops_the_instances_in_order(tmp_path: Path) -> None:
    """The instances get SIGTERM (and hwtune waits for them) before the error goes on, rather
    than being left running, or SIGKILLed without grace when hwtune's process dies."""
    script = f'trap "touch {tmp_path}/term.$I; exit 0" TERM\necho up\nsleep 30 &\nwait\n'
    out = open(os.devnull, "wb")  # noqa: SIM115 - closed in finally
    specs = [InstanceSpec(i, {**os.environ, "I": str(i)}) for i in range(2)]
    launcher = _FailingRelay(["sh", "-c", script], specs, stdout=out, stderr=out, kill_after=10)
    try:
        with pytest.raises(RuntimeError, match="relay failed"):
            launcher.run()
        assert all(child.returncode is not None for child in launcher.children.values())
        assert sorted(p.name for p in tmp_path.glob("term.*")) == ["term.0", "term.1"]
    finally:
        for child in launcher.children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        out.close()


def test_a_non_blocking_stdout_loses_nothing() -> None:
    """A parent that set O_NONBLOCK on the pipe hwtune writes to, and reads it late: before,
    the BufferedWriter dropped what EAGAIN refused (65536 of 630000 bytes arrived, exit 0)."""
    lines, width = 3000, 100
    script = f"import sys; sys.stdout.write(('x' * {width} + '\\n') * {lines})"
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    received: list[bytes] = []

    def late_reader() -> None:
        time.sleep(1.0)  # the pipe (64 KiB) is full long before this
        with os.fdopen(read_end, "rb") as pipe:
            received.append(pipe.read())

    reader = threading.Thread(target=late_reader)
    reader.start()
    specs = [InstanceSpec(i, dict(os.environ)) for i in range(2)]
    with open(os.devnull, "wb") as err, os.fdopen(write_end, "wb") as out:
        status = Launcher([PYTHON, "-c", script], specs, stdout=out, stderr=err).run()
    reader.join(timeout=60)
    assert status == 0
    data = received[0]
    assert len(data) == 2 * lines * (len("[0] ") + width + 1)
    assert sorted(set(data.splitlines())) == [b"[0] " + b"x" * width, b"[1] " + b"x" * width]


@pytest.mark.parametrize("closed", ["stdout", "stderr", "both"])
def test_instances_run_with_hwtunes_stdout_or_stderr_closed(tmp_path: Path, closed: str) -> None:
    """`hwtune exec --instances 2 -- CMD >&-` (or `2>&-`): Python starts with sys.stdout (or
    sys.stderr) None. Before: an AttributeError traceback, or exit 1 in silence with stderr
    closed, and no instance ran. Now they run, what they write to the closed stream going to
    /dev/null, and the other stream is relayed."""
    redirect = {"stdout": ">&-", "stderr": "2>&-", "both": ">&- 2>&-"}[closed]
    script = f"echo out; echo err >&2; touch {tmp_path}/ran.$HWTUNE_INSTANCE"
    # stdout (stderr) is a real descriptor that the closed one is told apart from
    report = tmp_path / "report"
    wrapper = f'exec "$@" {redirect}'
    with open(report, "wb") as sink:
        result = subprocess.run(
            [
                "sh",
                "-c",
                wrapper,
                "sh",
                *HWTUNE,
                "exec",
                "--instances",
                "2",
                "--",
                "sh",
                "-c",
                script,
            ],
            stdout=sink if closed == "stderr" else subprocess.DEVNULL,
            stderr=sink if closed == "stdout" else subprocess.DEVNULL,
            env=_env(tmp_path),
            timeout=120,
        )
    assert result.returncode == 0, report.read_text()
    assert sorted(p.name for p in tmp_path.glob("ran.*")) == ["ran.0", "ran.1"]
    relayed = report.read_text()
    assert "Traceback" not in relayed
    if closed == "stdout":
        assert sorted(relayed.splitlines()) == ["[0] err", "[1] err"], relayed
    elif closed == "stderr":
        assert sorted(relayed.splitlines()) == ["[0] out", "[1] out"], relayed


@pytest.mark.parametrize("instances", [[], ["--instances", "2"]])
@pytest.mark.parametrize("by_path", [False, True])
def test_an_executable_script_without_a_shebang_runs_under_sh(
    tmp_path: Path, instances: list[str], by_path: bool
) -> None:
    """execvp(3) runs a file execve(2) refuses with ENOEXEC under /bin/sh, and so do `env`
    and `nice` (POSIX); before, exec exited 126 for it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "job"
    script.write_text('echo "ran with $1 as ${HWTUNE_INSTANCE:-?}"\n')
    script.chmod(0o755)
    env = _env(tmp_path, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    program = "job" if by_path else str(script)
    assert subprocess.run(["env", program, "x"], env=env, capture_output=True).returncode == 0
    result = subprocess.run(
        [*HWTUNE, "exec", *instances, "--", program, "arg"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    if instances:
        assert sorted(result.stdout.splitlines()) == [
            "[0] ran with arg as 0",
            "[1] ran with arg as 1",
        ]
    else:
        assert result.stdout.startswith("ran with arg as "), result.stdout


@pytest.mark.parametrize("instances", [[], ["--instances", "2"]])
def test_an_inherited_entry_with_an_empty_name_is_dropped_with_a_note(
    tmp_path: Path, instances: list[str]
) -> None:
    """`env '=weird' hwtune exec -- CMD`: execve took the entry, but Python cannot pass it on.
    Before: exec refused to run anything, with a hint to fix "config file [env], --set or the
    profile", none of which set it."""
    result = subprocess.run(
        ["env", "=weird", *HWTUNE, "exec", *instances, "--", "sh", "-c", "echo ran"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    expected = ["[0] ran", "[1] ran"] if instances else ["ran"]
    assert sorted(result.stdout.splitlines()) == expected
    assert "dropping the inherited environment entry '=weird'" in result.stderr
    assert "config file" not in result.stderr
