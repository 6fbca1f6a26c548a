"""Writes: `hwtune apply` killed at random moments, on a full disk, a read-only file system,
through planted symlinks, into directories it does not own, and twenty at once.

Every apply here is a real `python -m hwtune apply --output DIR --root SNAPSHOT` process; the
snapshot makes detection the same in every run, and `--set RELIABILITY_MARK=<n>` makes each run's
files differ from the previous run's. The expected bytes of run n come from the same command
run in-process into a reference directory (checked once against a real process).

What "nothing lost" means, checked after every kill: each output file is byte-for-byte the
complete old version or the complete new one (never a mix, never empty, never a prefix); the
next apply rolls back an interrupted one, so after it the set of files is consistent again;
and at the end `hwtune revert` restores the set of the last apply that completed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli

from .conftest import KILL_ROUNDS, LONG, REPO_ROOT, Figures, require_root

TMP_MARK = ".hwtune-tmp-"  # hwtune.fs.atomic.TMP_MARK: temporary files of a write
NOBODY = 65534


def base_environ(tmp_path: Path) -> dict[str, str]:
    """The caller's environment without hwtune settings, user config or launcher ranks."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "XDG_", "SLURM_", "OMPI_", "PMI_", "MPI_"))
        and k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE")
    }
    env["XDG_CONFIG_HOME"] = str(tmp_path / "no-user-config")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


class Applier:
    """Runs `hwtune apply` for one output directory and knows each mark's expected files."""

    def __init__(self, root: Path, environ: dict[str, str], scratch: Path) -> None:
        self.root = root
        self.environ = environ
        self.scratch = scratch
        self._refs: dict[str, dict[str, bytes]] = {}

    def argv(self, output: Path, mark: str) -> list[str]:
        return [
            "apply",
            "--output",
            str(output),
            "--root",
            str(self.root),
            "--set",
            f"RELIABILITY_MARK={mark}",
        ]

    def spawn(self, output: Path, mark: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "hwtune", *self.argv(output, mark)],
            env=self.environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def run(self, output: Path, mark: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hwtune", *self.argv(output, mark)],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def expected(self, mark: str) -> dict[str, bytes]:
        """The files of a complete apply with this mark (in-process, into a fresh dir)."""
        if mark not in self._refs:
            ref = self.scratch / f"ref-{mark}"
            result = run_cli(self.argv(ref, mark), self.environ)
            assert result.exit_status == 0, result.stderr
            self._refs[mark] = outputs(ref)
        return self._refs[mark]


def outputs(directory: Path) -> dict[str, bytes]:
    """The output files (not the lock, journal or temporaries) and their bytes."""
    found = {}
    for entry in sorted(os.listdir(directory)):
        path = directory / entry
        if entry.startswith(".") or path.is_dir():
            continue
        found[entry] = path.read_bytes()
    return found


def temporaries(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if TMP_MARK in n]


def journal_states(directory: Path) -> dict[str, bool | None]:
    """Journal entry id -> complete (None: a directory without a manifest)."""
    journal = directory / ".journal"
    states: dict[str, bool | None] = {}
    for entry in sorted(os.listdir(journal)) if journal.is_dir() else ():
        manifest = journal / entry / "manifest.json"
        states[entry] = (
            json.loads(manifest.read_text())["complete"] if manifest.is_file() else None
        )
    return states


def wait_for_new_entry(output: Path, before: set[str], process: subprocess.Popen[bytes]) -> None:
    """Poll until a journal entry not in `before` exists, or the process has exited."""
    journal = output / ".journal"
    while process.poll() is None:
        try:
            if set(os.listdir(journal)) - before:
                return
        except FileNotFoundError:
            pass
        time.sleep(0.0005)


@pytest.fixture
def applier(machine_snapshot: Path, tmp_path: Path) -> Applier:
    return Applier(machine_snapshot, base_environ(tmp_path), tmp_path)


# ---------------------------------------------------------------------------- SIGKILL


def test_sigkill_at_random_points(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    output = tmp_path / "out"
    seed = random.SystemRandom().randrange(2**32) if LONG else 20240601
    rng = random.Random(seed)
    started = time.monotonic()
    first = applier.run(output, "0")
    duration = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    assert outputs(output) == applier.expected("0"), "a real apply differs from the in-process one"
    last_complete = "0"  # the mark whose complete set a rollback returns to
    attempted: list[str] = []  # marks tried since then: their files may still be on disk
    mid_write = mixed = 0
    for round_number in range(1, KILL_ROUNDS + 1):
        mark = str(round_number)
        new = applier.expected(mark)
        attempted.append(mark)
        allowed = {
            name: {applier.expected(m).get(name) for m in (last_complete, *attempted)}
            for name in new
        }
        journal_before = set(journal_states(output))
        process = applier.spawn(output, mark)
        if round_number % 3 == 0:
            # Anywhere in the run: start-up, detection, planning, writing, exit.
            time.sleep(rng.uniform(0, duration * 1.3))
        else:
            # In the write phase, which is ~2% of the run: once this apply's journal entry
            # appears (its files are replaced next), at a random moment of the next 30 ms.
            wait_for_new_entry(output, journal_before, process)
            time.sleep(rng.uniform(0, 0.03))
        process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate(timeout=120)
        killed = process.returncode == -signal.SIGKILL
        if not killed:
            assert process.returncode == 0, stderr.decode()
        figures.count("killed" if killed else "finished before the kill")
        current = outputs(output)
        for name, data in current.items():
            assert name in allowed, f"round {round_number}: unexpected file {name}"
            assert data in allowed[name], (
                f"round {round_number}: {name} is neither a complete old nor the new version "
                f"({len(data)} bytes)"
            )
            figures.count("files checked: complete")
        for name in allowed:
            if name not in current:
                assert None in allowed[name], f"round {round_number}: {name} vanished"
        states = journal_states(output)
        incomplete = [i for i, done in states.items() if done is False]
        if incomplete or temporaries(output):
            mid_write += 1
        if current != new and current != applier.expected(last_complete):
            mixed += 1
        if current == new and not incomplete:
            last_complete, attempted = mark, []
    final = applier.run(output, "final")
    assert final.returncode == 0, final.stderr
    assert outputs(output) == applier.expected("final")
    assert not temporaries(output), temporaries(output)
    assert all(done is not False for done in journal_states(output).values())
    reverted = run_cli(["revert", "--output", str(output)], applier.environ)
    assert reverted.exit_status == 0, reverted.stderr
    assert outputs(output) == applier.expected(last_complete), (
        "revert did not restore the last complete set"
    )
    figures.count("killed while writing (journal open or temporaries left)", mid_write)
    figures.count("left a mixed set, rolled back by the next apply", mixed)
    figures.note(
        rounds=KILL_ROUNDS,
        seed=seed,
        apply_seconds=round(duration, 3),
        journal_dirs_without_manifest=sum(1 for d in journal_states(output).values() if d is None),
    )


# ---------------------------------------------------------------------------- mounts


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    require_root()
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """Fill the file system of `directory`, then free `leave` bytes."""
    filler = directory / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as err:
        assert err.errno == errno.ENOSPC
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))
    return filler


def refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, "the apply succeeded"
    assert "Traceback" not in result.stderr, result.stderr
    assert "error:" in result.stderr and any(w in result.stderr for w in words), result.stderr


def test_full_disk(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    """Apply onto a tmpfs filled up with 0 to 60 KiB left: it fits, or it fails cleanly.

    (1 MiB, not less: the journal keeps the previous version of each replaced file for the
    last 20 applies, about 20 x 20 KB, and it is pruned only after an apply succeeds.)"""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        output = disk / "etc-hwtune"
        assert applier.run(output, "old").returncode == 0
        old = applier.expected("old")
        for leave in range(0, 64 * 1024, 12 * 1024):
            filler = fill(disk, leave)
            result = applier.run(output, f"new{leave}")
            figures.count("faults injected")
            if result.returncode == 0:
                assert outputs(output) == applier.expected(f"new{leave}")
                figures.count("fitted")
            else:
                refused(result, "No space left", "file system is full")
                assert outputs(output) == old, "a failed apply changed the files"
                figures.count("refused with a clear message, previous files intact")
            assert not temporaries(output), temporaries(output)
            filler.unlink()
            again = applier.run(output, "old")  # space back: the next apply works
            assert again.returncode == 0, again.stderr
            assert outputs(output) == old


def test_read_only_file_system(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    with tmpfs(tmp_path / "ro", "1m") as mount:
        output = mount / "etc-hwtune"
        assert applier.run(output, "old").returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        try:
            result = applier.run(output, "new")
            refused(result, "Read-only file system", "read-only")
            assert outputs(output) == applier.expected("old")
            figures.count("refused with a clear message, previous files intact")
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)


def test_read_only_bind_mount(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    require_root()
    output = tmp_path / "bound"
    assert applier.run(output, "old").returncode == 0
    done = subprocess.run(
        ["mount", "--bind", str(output), str(output)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(output)], check=True)
        result = applier.run(output, "new")
        refused(result, "Read-only file system", "read-only")
        assert outputs(output) == applier.expected("old")
        figures.count("refused with a clear message, previous files intact")
    finally:
        subprocess.run(["umount", "-l", str(output)], check=False)


# ---------------------------------------------------------------------------- ownership


def plant_symlink(output: Path, name: str, victim: Path) -> Path:
    """Another user (nobody) replaces `name` with a symlink to `victim`."""
    link = output / name
    link.unlink()
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    return link


@pytest.mark.parametrize("mode", [0o1777, 0o0777], ids=["sticky-world-writable", "world-writable"])
def test_planted_symlink_never_writes_through(
    mode: int, applier: Applier, tmp_path: Path, figures: Figures
) -> None:
    """Whatever apply does with a symlink another user planted, the file it points to (here
    a stand-in for /etc/shadow) is never written, and no copy of it lands anywhere readable."""
    require_root()
    output = tmp_path / "shared-out"
    assert applier.run(output, "old").returncode == 0
    output.chmod(mode)
    victim = tmp_path / "victim"
    victim.write_bytes(b"root:SECRET-HASH:19000:0:99999:7:::\n")
    victim.chmod(0o600)
    link = plant_symlink(output, "hwtune.env", victim)
    result = applier.run(output, "new")
    assert "Traceback" not in result.stderr, result.stderr
    assert victim.read_bytes() == b"root:SECRET-HASH:19000:0:99999:7:::\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    leaked = [
        str(p)
        for p in output.rglob("*")
        if p.is_file() and not p.is_symlink() and b"SECRET-HASH" in p.read_bytes()
    ]
    assert not leaked, f"the symlink's target was copied into {leaked}"
    assert b"SECRET-HASH" not in result.stdout.encode()
    figures.count("symlink target intact")
    figures.note(exit_status=result.returncode, link_kept=link.is_symlink())


def test_planted_symlink_is_refused(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    """Issue 7: a target that is a symlink planted by another user is refused with a clear
    message and a non-zero exit, and the previous files (the link included) are left alone."""
    require_root()
    output = tmp_path / "shared-out"
    assert applier.run(output, "old").returncode == 0
    output.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("not hwtune's\n")
    link = plant_symlink(output, "hwtune.env", victim)
    before = {n: d for n, d in outputs(output).items() if n != "hwtune.env"}
    result = applier.run(output, "new")
    refused(result, "symlink", "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert {n: d for n, d in outputs(output).items() if n != "hwtune.env"} == before
    figures.count("refused")


def test_directory_not_owned_by_root_is_refused(
    applier: Applier, tmp_path: Path, figures: Figures
) -> None:
    """Issue 7: running as root, an output directory owned by another user (who could swap
    files under it at any moment) is refused with a clear message, previous files intact."""
    require_root()
    output = tmp_path / "users-dir"
    assert applier.run(output, "old").returncode == 0
    os.chown(output, NOBODY, NOBODY)
    result = applier.run(output, "new")
    refused(result, "owned by", "owner")
    assert outputs(output) == applier.expected("old")
    figures.count("refused")


# ---------------------------------------------------------------------------- concurrency


def test_twenty_concurrent_applies(applier: Applier, tmp_path: Path, figures: Figures) -> None:
    output = tmp_path / "busy"
    assert applier.run(output, "base").returncode == 0
    marks = [f"c{i}" for i in range(20)]
    processes = [applier.spawn(output, mark) for mark in marks]
    results = [
        (p.wait(timeout=300), p.stdout.read().decode(), p.stderr.read().decode())  # type: ignore[union-attr]
        for p in processes
    ]
    for status, _out, err in results:
        # 6 (LOCKED) is the documented outcome of waiting longer than --lock-timeout.
        assert status in (0, 6), err
        assert "Traceback" not in err, err
        figures.count("exit 0" if status == 0 else "exit 6: lock wait exceeded (documented)")
    final = outputs(output)
    winners = [m for m in marks if applier.expected(m) == final]
    assert len(winners) == 1, "the files are not one apply's complete set"
    assert not temporaries(output)
    states = journal_states(output)
    assert all(done is True for done in states.values()), states
    figures.note(processes=len(marks), journal_entries=len(states), last_writer=winners[0])
