"""What apply refuses: links and odd files where an output goes, a planted `.lock` or
`.journal`, and (as root) directories others could swap files in. Also the file names."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hwtune.apply.outputs import apply_all, revert
from hwtune.apply.render import render_env
from hwtune.errors import ApplyError
from hwtune.fs.atomic import locked
from hwtune.fs.guard import check_directory, read_regular
from tests.apply_profiles import make_hardware, make_profile

HW = make_hardware()
A = make_profile({"MODE": "a"}, intra=2)
B = make_profile({"MODE": "b"}, intra=1)
NOBODY = 65534
SECRET = b"root:SECRET-HASH:19000:0:99999:7:::\n"


def visible(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    }


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def test_env_file_names_and_formats(tmp_path: Path) -> None:
    """hwtune.env is what a unit's EnvironmentFile= reads; hwtune.sh is for `source`."""
    apply_all(tmp_path, A, HW)
    assert (tmp_path / "hwtune.env").read_text() == render_env(A, "systemd")
    assert (tmp_path / "hwtune.sh").read_text() == render_env(A, "sh")
    assert 'MODE="a"' in (tmp_path / "hwtune.env").read_text()
    assert "export MODE='a'" in (tmp_path / "hwtune.sh").read_text()
    assert not (tmp_path / "hwtune.systemd.env").exists()


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "diff"])
def test_a_symlink_target_is_refused_and_never_read(
    dry_run: bool, tmp_path: Path, victim: Path
) -> None:
    out = tmp_path / "out"
    apply_all(out, A, HW)
    (out / "hwtune.sh").unlink()
    (out / "hwtune.sh").symlink_to(victim)
    before = visible(out)
    with pytest.raises(ApplyError, match=r"hwtune\.sh: it is a symbolic link \(owned by") as err:
        apply_all(out, B, HW, dry_run=dry_run)
    assert "SECRET" not in str(err.value) and err.value.hint
    assert os.readlink(out / "hwtune.sh") == str(victim)
    assert visible(out) == before and victim.read_bytes() == SECRET
    copies = [p for p in out.rglob("*") if p.is_file() and not p.is_symlink()]
    assert not any(b"SECRET" in p.read_bytes() for p in copies)


def test_a_fifo_target_is_refused_without_blocking(tmp_path: Path) -> None:
    apply_all(tmp_path, A, HW)
    (tmp_path / "hwtune.json").unlink()
    os.mkfifo(tmp_path / "hwtune.json")
    with pytest.raises(ApplyError, match="it is a named pipe"):
        apply_all(tmp_path, B, HW)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "hwtune.json").st_mode)


def test_read_regular_never_follows(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(ApplyError, match="symbolic link"):
        read_regular(tmp_path / "link")
    assert read_regular(tmp_path / "absent") is None
    assert read_regular(victim) == (SECRET, 0o600)


def test_a_planted_lock_link_is_not_truncated(tmp_path: Path, victim: Path) -> None:
    (tmp_path / ".lock").symlink_to(victim)
    with pytest.raises(ApplyError, match=r"\.lock: it is a symbolic link"):
        apply_all(tmp_path, A, HW)
    assert victim.read_bytes() == SECRET


def test_a_planted_journal_link_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / ".journal").symlink_to(elsewhere)
    with pytest.raises(ApplyError, match=r"journal .*\.journal: it is a symbolic link"):
        apply_all(out, A, HW)
    assert visible(out) == {} and not list(elsewhere.iterdir())
    with pytest.raises(ApplyError, match="symbolic link"):
        revert(out)


def _foreign(directory: Path) -> None:
    """Make `directory` someone else's: owned by nobody when we are root, else it already is
    (as far as a root apply is concerned, any owner but root is someone else)."""
    if os.geteuid() == 0:
        os.chown(directory, NOBODY, NOBODY)


def test_as_root_a_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _foreign(out)
    with pytest.raises(ApplyError, match=r"it is owned by .*uid \d+") as err:
        check_directory(out, euid=0)
    assert err.value.hint and "chown root" in err.value.hint and "--output" in err.value.hint
    check_directory(out, euid=1000)  # a user writes with their own rights: nothing to check


@pytest.mark.parametrize(
    ("mode", "refused"),
    [(0o777, "everyone"), (0o775, "its group"), (0o1777, "everyone"), (0o755, None)],
)
def test_as_root_a_directory_others_can_write_is_refused_sticky_or_not(
    mode: int, refused: str | None, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(mode)
    if os.stat(out).st_uid != 0:
        pytest.skip("needs a directory owned by root (run as root)")
    if refused is None:
        check_directory(out, euid=0)
        return
    with pytest.raises(ApplyError, match=f"writable by {refused}"):
        check_directory(out, euid=0)


def test_as_root_apply_and_revert_refuse_a_foreign_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (the check applies to root only)")
    out = tmp_path / "out"
    apply_all(out, A, HW)
    before = visible(out)
    os.chown(out, NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"owned by (nobody|uid)"):
        apply_all(out, B, HW)
    with pytest.raises(ApplyError, match="owned by"), locked(out, 1.0):
        pass
    with pytest.raises(ApplyError, match="owned by"):
        revert(out)
    assert visible(out) == before
    os.chown(out, 0, 0)
    os.chown(out / ".journal", NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"\.journal: it is owned by"):
        apply_all(out, B, HW)
    assert visible(out) == before
