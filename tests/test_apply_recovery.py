"""Rolling back an apply that was killed midway keeps what the user wrote since.

A real apply is killed (SIGKILL) after it replaced hwtune.env; the user then edits files by
hand before the next `hwtune apply` or `hwtune revert` rolls the interrupted apply back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwtune.apply import journal
from hwtune.apply.outputs import apply_all, revert
from hwtune.errors import ApplyError
from tests.apply_profiles import PYTHON, REPO, make_hardware, make_profile
from tests.test_apply import KILL_MIDWAY

HW = make_hardware()
A = make_profile({"MODE": "a"}, intra=2)
B = make_profile({"MODE": "b", "EXTRA": "only in b"}, intra=1)
EDIT = b"# edited by hand after the crash\nMODE=mine\n"


def _kill_an_apply_midway(out: Path) -> None:
    """Apply B to `out`, killed once hwtune.json is written (hwtune.env is new, profile.json
    still the previous one; tests/test_apply.py shows the order)."""
    script = KILL_MIDWAY.format(repo=str(REPO), victim="hwtune.json", out=str(out))
    child = subprocess.run([PYTHON, "-c", script], capture_output=True, timeout=60)
    assert child.returncode == -9, child.stderr.decode()


def _edit(path: Path, *, in_place: bool) -> None:
    if in_place:  # `>>`, or an editor that writes the file it opened
        with path.open("r+b") as f:
            f.truncate(0)
            f.write(EDIT)
    else:  # an editor that writes a new file and renames it over (vim's default, sed -i)
        new = path.with_name(path.name + ".new")
        new.write_bytes(EDIT)
        new.rename(path)


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("then", ["apply", "revert"])
def test_a_file_edited_after_the_crash_is_not_rolled_back_over(
    tmp_path: Path, then: str, in_place: bool
) -> None:
    """Before: the roll-back renamed the pre-crash backup over hwtune.env (and removed a file
    the killed apply had created), so the user's edit was lost for good."""
    apply_all(tmp_path, A, HW)
    _kill_an_apply_midway(tmp_path)
    _edit(tmp_path / "hwtune.env", in_place=in_place)
    if then == "revert":
        _, _, recovered = revert(tmp_path)
        assert recovered
        assert (tmp_path / "hwtune.env").read_bytes() == EDIT
    else:
        report = apply_all(tmp_path, B, HW)
        assert report.recovered
        assert tmp_path / "hwtune.env" in report.changed
        revert(tmp_path)  # the apply journalled the edit as the previous version
        assert (tmp_path / "hwtune.env").read_bytes() == EDIT


def test_a_file_the_killed_apply_created_and_the_user_edited_is_kept(tmp_path: Path) -> None:
    """hwtune.env did not exist before the killed apply: rolling back removed it, edit and
    all."""
    apply_all(tmp_path, A, HW)
    (tmp_path / "hwtune.env").unlink()
    apply_all(tmp_path, A, HW)  # journals hwtune.env as created
    revert(tmp_path)
    assert not (tmp_path / "hwtune.env").exists()
    _kill_an_apply_midway(tmp_path)
    assert (tmp_path / "hwtune.env").exists()  # created by the killed apply
    _edit(tmp_path / "hwtune.env", in_place=False)
    revert(tmp_path)
    assert (tmp_path / "hwtune.env").read_bytes() == EDIT


def test_files_nobody_touched_after_the_crash_are_still_rolled_back(tmp_path: Path) -> None:
    apply_all(tmp_path, A, HW)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    _kill_an_apply_midway(tmp_path)
    _, _, recovered = revert(tmp_path)
    assert recovered
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before


def test_an_entry_whose_manifest_names_another_id_is_rolled_back_once(tmp_path: Path) -> None:
    """The entry is its directory. Before: restore and discard used the manifest's "id", so an
    entry under another name (copied or moved by hand) was "rolled back" by every apply and
    revert and never removed, and revert never reached the apply after it."""
    apply_all(tmp_path, A, HW)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    _kill_an_apply_midway(tmp_path)
    journal_dir = tmp_path / ".journal"
    (interrupted,) = (p for p in journal_dir.iterdir() if 'complete": false' in _manifest(p))
    interrupted.rename(interrupted.with_name(interrupted.name + "-moved"))
    report = apply_all(tmp_path, B, HW)
    assert report.recovered == (interrupted.name + "-moved",)
    assert not interrupted.with_name(interrupted.name + "-moved").exists()
    entry_id, _, recovered = revert(tmp_path)
    assert entry_id == report.journal_id and not recovered
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before


def _manifest(entry: Path) -> str:
    return (entry / "manifest.json").read_text()


@pytest.fixture
def immutable_json(tmp_path: Path) -> Iterator[Path]:
    """hwtune.json of an applied directory made immutable (chattr +i), cleared afterwards."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("chattr +i needs root and e2fsprogs")
    apply_all(tmp_path, A, HW)
    target = tmp_path / "hwtune.json"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable attribute")
    try:
        yield target
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


def test_an_apply_stopped_by_an_immutable_file_is_undone_there_and_then(
    tmp_path: Path, immutable_json: Path
) -> None:
    """Before: the file could not be linked into the journal, so it was copied; the roll-back
    then renamed the copy over the immutable file it had never replaced, failed with EPERM,
    and left an incomplete entry that every later apply and revert failed to roll back."""
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ApplyError) as failed:
        apply_all(tmp_path, B, HW)
    message = str(failed.value)
    assert f"could not write {immutable_json}: Operation not permitted" in message
    assert "already replaced were restored" in message and "also failed" not in message
    assert "immutable" in (failed.value.hint or "")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert not journal.pending(tmp_path)


def test_a_revert_stopped_midway_says_the_directory_is_mixed_and_finishes_later(
    tmp_path: Path, immutable_json: Path
) -> None:
    """Before: the error said "the previous file is intact" while the files before the failure
    were already reverted."""
    subprocess.run(["chattr", "-i", str(immutable_json)], check=True)
    after_a = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    apply_all(tmp_path, B, HW)
    subprocess.run(["chattr", "+i", str(immutable_json)], check=True)
    with pytest.raises(ApplyError) as failed:
        revert(tmp_path)
    message = str(failed.value)
    assert "intact" not in message
    assert "hwtune.env, hwtune.sh, hwtune.dotenv were restored already" in message
    assert f"{tmp_path} mixes the files before and after apply" in message
    subprocess.run(["chattr", "-i", str(immutable_json)], check=True)
    revert(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == after_a


def test_root_refused_by_the_file_system_is_not_told_to_run_as_root() -> None:
    """Root gets EACCES where the file system, not a mode, refuses it (NFS root_squash; /sys
    takes no new files): the hint said "run as root" to root."""
    sysfs = Path("/sys/kernel/mm")
    if os.geteuid() != 0 or not sysfs.is_dir():
        pytest.skip("needs root and sysfs")
    with pytest.raises(ApplyError) as failed:
        apply_all(sysfs, A, HW)
    if "Permission denied" not in str(failed.value):
        pytest.skip(f"sysfs refused otherwise here: {failed.value}")
    hint = failed.value.hint or ""
    assert "run as root" not in hint and "root was refused" in hint, hint
