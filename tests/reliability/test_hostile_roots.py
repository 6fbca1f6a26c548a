"""Hostile roots and umasks (issue 15): a snapshot someone else prepared, and a umask someone
else set, against detect and apply.

- Each file detect reads, replaced in turn by a link out of the root (absolute and relative),
  a FIFO, a device that never ends (as root), and a sparse 1 GiB file: detect finishes (a
  watchdog alarm fails a hang instead of waiting forever), no probe raises, nothing of the file
  outside the root appears anywhere in the result, and every issue is a bounded one-liner.
- apply, a second apply and a revert under umask 000 and 077: no directory or file hwtune
  creates is writable by others, outputs stay readable, the journal stays private.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest

from hwtune.models.convert import dump
from hwtune.probes import detect
from hwtune.probes.issues import MAX_REASON

from .conftest import Figures, unexpected
from .test_faults import TARGETS

SECRET = "root:HOSTILE-ROOT-SECRET:19000:0:99999:7:::\n"
KINDS = ("link-absolute", "link-relative", "fifo", "endless-device", "huge")
# A detect of a snapshot takes well under a second; a hang is what this catches.
WATCHDOG_S = 60


class Hang(Exception):
    pass


@contextmanager
def watchdog(seconds: int) -> Iterator[None]:
    def fire(_signum: int, _frame: FrameType | None) -> None:
        raise Hang(f"detect did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def plant(root: Path, relative: str, kind: str, secret: Path) -> None:
    path = root / relative
    if os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link-absolute":
        path.symlink_to(secret)
    elif kind == "link-relative":
        path.symlink_to("../" * len(Path(relative).parts) + "../" + secret.name)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "endless-device":
        os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(1, 5))  # /dev/zero
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(1 << 30)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_root(kind: str, machine_tree: Path, tmp_path: Path, figures: Figures) -> None:
    if kind == "endless-device" and os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    secret = machine_tree.parent / "shadow"  # beside the root, never inside it
    secret.write_text(SECRET)
    pristine = {
        r: (machine_tree / r).read_bytes() for r in TARGETS if (machine_tree / r).is_file()
    }
    for relative in pristine:
        plant(machine_tree, relative, kind, secret)
        figures.count("files planted")
        try:
            with watchdog(WATCHDOG_S):
                hardware = detect(machine_tree, gpus=False, tensorflow=False)
        finally:
            (machine_tree / relative).unlink()
            (machine_tree / relative).write_bytes(pristine[relative])
        raised = unexpected(hardware.issues)
        assert not raised, f"{kind} at {relative}: a probe raised: {raised}"
        text = json.dumps(dump(hardware))
        assert "HOSTILE-ROOT-SECRET" not in text, f"{kind} at {relative}: followed out of the root"
        for issue in hardware.issues:
            assert len(issue.reason) <= MAX_REASON and issue.reason.isprintable(), issue
        if any(
            issue.path and relative.endswith(issue.path.split("/")[-1])
            for issue in hardware.issues
        ):
            figures.count("refusal reported as an issue")
        figures.count("detect completed")
    figures.note(kind=kind, targets=len(pristine))


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("mask", [0o000, 0o077], ids=["umask-000", "umask-077"])
def test_umask(mask: int, tmp_path: Path, figures: Figures) -> None:
    from hwtune.apply.outputs import apply_all, revert
    from tests.apply_profiles import make_hardware, make_profile

    hw = make_hardware()
    out = tmp_path / "etc" / "hwtune"
    with umask(mask):
        apply_all(out, make_profile({"MODE": "a"}, intra=2), hw)
        apply_all(out, make_profile({"MODE": "b"}, intra=1), hw)
        revert(out)
        apply_all(out, make_profile({"MODE": "c"}, intra=1), hw)
    journal = out / ".journal"
    for path in [tmp_path / "etc", *sorted(p for p in tmp_path.rglob("*"))]:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        figures.count("paths checked")
        assert not mode & 0o022, f"{path} is {mode:04o} under umask {mask:03o}"
        if path == journal or journal in path.parents:
            if path.is_dir():  # (its files are the outputs' hard links, behind 0700)
                assert mode == 0o700, f"{path} is {mode:04o}: the journal is private"
        elif path.is_dir():
            assert mode == 0o755, f"{path} is {mode:04o}"
        elif not path.name.startswith("."):
            assert mode == 0o644, f"{path} is {mode:04o}: jobs must read it"
    figures.note(umask=f"{mask:03o}")
