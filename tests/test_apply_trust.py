"""Issue 15 items 1-3: modes whatever the umask, links along the path, sticky directories.

Root-only checks run as root (the refusals apply to root) and skip otherwise; the umask and
hard-link checks run as anyone."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hwtune.apply.outputs import apply_all
from hwtune.errors import ApplyError
from hwtune.fs.atomic import locked
from tests.apply_profiles import make_hardware, make_profile

HW = make_hardware()
A = make_profile({"MODE": "a"}, intra=2)
B = make_profile({"MODE": "b"}, intra=1)
NOBODY = 65534
SECRET = b"root:SECRET-HASH:19000:0:99999:7:::\n"

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="the checks of other users' directories apply to root only"
)


@contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _journal_dirs(out: Path) -> list[Path]:
    journal = out / ".journal"
    return [journal, *journal.iterdir(), *journal.glob("*/files")]


def test_umask_000_makes_nothing_world_writable(tmp_path: Path) -> None:
    out = tmp_path / "new" / "etc" / "hwtune"  # parents created by the first apply
    with umask(0o000):
        apply_all(out, A, HW)
        apply_all(out, B, HW)  # a second apply journals the first one's files
    for level in (tmp_path / "new", tmp_path / "new/etc", out):
        assert mode(level) == 0o755, (level, oct(mode(level)))
    for directory in _journal_dirs(out):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))
    for path in out.rglob("*"):
        if path.is_file():
            assert not mode(path) & 0o022, (path, oct(mode(path)))


def test_umask_077_keeps_outputs_readable_and_the_journal_private(tmp_path: Path) -> None:
    out = tmp_path / "new" / "hwtune"
    with umask(0o077):
        apply_all(out, A, HW)
        apply_all(out, B, HW)
    assert mode(tmp_path / "new") == 0o755 and mode(out) == 0o755
    for name in ("hwtune.env", "hwtune.sh", "profile.json"):
        assert mode(out / name) == 0o644, name
    assert mode(out / ".lock") == 0o600
    for directory in _journal_dirs(out):
        assert mode(directory) == 0o700, directory
    assert mode(next((out / ".journal").glob("*/manifest.json"))) == 0o600


def test_a_hard_linked_lock_is_refused_and_never_truncated(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(SECRET)
    os.link(victim, out / ".lock")
    with pytest.raises(ApplyError, match=r"\.lock: it has 2 hard links"):
        apply_all(out, A, HW)
    assert victim.read_bytes() == SECRET
    assert not (out / "hwtune.env").exists()


@needs_root
def test_another_user_cannot_hold_the_lock() -> None:
    """flock needs only a read-only descriptor: with `.lock` 0644 in a directory others may
    enter, any local user held root's lock and every apply timed out (exit 6). A lock file
    made 0644 by an earlier hwtune is closed to others by the next apply."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # a path others may enter, as /etc/hwtune's is
    try:
        base.chmod(0o755)
        out = base / "out"
        apply_all(out, A, HW)
        (out / ".lock").chmod(0o644)  # as hwtune left it before
        apply_all(out, B, HW)
        assert mode(out / ".lock") == 0o600

        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # another user, trying to hold the lock (fork: nothing to exec)
            said = b"failed"
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                try:
                    fd = os.open(out / ".lock", os.O_RDONLY)
                except PermissionError:
                    said = b"refused"
                else:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    said = b"held"
            finally:
                os.write(write_end, said)
                if said == b"held":
                    time.sleep(30)
                os._exit(0)
        os.close(write_end)
        try:
            assert os.read(read_end, 16) == b"refused"
            assert apply_all(out, A, HW, lock_timeout=2).changed
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os.close(read_end)
    finally:
        shutil.rmtree(base)


@needs_root
def test_a_link_in_another_users_directory_is_not_followed(tmp_path: Path) -> None:
    """`apply --output ~user/out` with out -> a root-only directory: the user chose where
    root writes. The last component (the target) is root's and 0700, which is all the old
    check looked at."""
    home = tmp_path / "home"
    home.mkdir()
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    (home / "out").symlink_to(root_only)
    os.chown(home, NOBODY, NOBODY)
    os.lchown(home / "out", NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"home: it is owned by (nobody|uid)"):
        apply_all(home / "out", A, HW)
    assert list(root_only.iterdir()) == []


@needs_root
def test_a_directory_below_another_users_directory_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "out").mkdir(parents=True)
    os.chown(home, NOBODY, NOBODY)  # they can rename out away and put their own in its place
    with pytest.raises(ApplyError, match=r"home: it is owned by"):
        apply_all(home / "out", A, HW)


@needs_root
def test_a_root_link_to_another_users_directory_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "out").symlink_to(theirs)
    with pytest.raises(ApplyError, match=r"theirs: it is owned by"):
        apply_all(tmp_path / "out", A, HW)
    assert list(theirs.iterdir()) == []


@needs_root
def test_dotdot_after_a_link_is_checked_where_the_kernel_takes_it(tmp_path: Path) -> None:
    """`--output via/../out` with via -> theirs/sub: the kernel writes in theirs/out; read as
    text (normpath), the path would be tmp_path/out, a root-owned place that passes."""
    theirs = tmp_path / "theirs"
    (theirs / "sub").mkdir(parents=True)
    (theirs / "out").mkdir()
    for path in (theirs, theirs / "sub", theirs / "out"):
        os.chown(path, NOBODY, NOBODY)
    (tmp_path / "via").symlink_to(theirs / "sub")
    with pytest.raises(ApplyError, match=r"theirs: it is owned by"):
        apply_all(tmp_path / "via" / ".." / "out", A, HW)
    assert list((theirs / "out").iterdir()) == []
    assert not (tmp_path / "out").exists()


@needs_root
def test_a_root_owned_path_through_links_and_sticky_dirs_is_accepted(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp: passing through it is fine when the next entry is root's
    real = shared / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    apply_all(tmp_path / "via" / "out", A, HW)
    assert (real / "out" / "hwtune.env").is_file()


@needs_root
def test_a_sticky_world_writable_output_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o1777)
    with pytest.raises(ApplyError, match=r"writable by everyone \(mode 1777\)") as err:
        apply_all(out, A, HW)
    # the hint never says to take write access away from a shared directory like /tmp
    assert err.value.hint and "chmod" not in err.value.hint and "of your own" in err.value.hint
    with pytest.raises(ApplyError, match="writable by everyone"), locked(out, 1.0):
        pass
    assert not (out / "hwtune.env").exists()


@needs_root
def test_an_entry_of_another_user_in_a_sticky_directory_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "out"
    planted.mkdir()
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"out in it belongs to"):
        apply_all(planted, A, HW)


@needs_root
def test_a_lock_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_bytes(b"")
    os.chown(out / ".lock", NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"\.lock: it is owned by"):
        apply_all(out, A, HW)


def test_cache_and_tuned_result_directories_are_0700_under_umask_000(tmp_path: Path) -> None:
    from hwtune.apply.cache import store
    from hwtune.pipeline.measured import save_result

    tuned = tmp_path / "state" / "tuned"
    cache_file = tmp_path / "cache" / "hwtune" / "configure-x.json"
    with umask(0o000):
        path = save_result(
            {
                "fingerprint": "abc123",
                "workload": "builtin:cnn",
                "mode": "throughput",
                "ratio": 1.31,
                "settings": {"threads.intra_op": 1, "instances": 1},
            },
            {"HWTUNE_TUNED_DIR": str(tuned)},
        )
        store(str(cache_file), {"f": 1}, {"env": {}})
    for directory in (tmp_path / "state", tuned, path.parent):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))
    for directory in (tmp_path / "cache", cache_file.parent):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))
    assert cache_file.is_file() and not mode(cache_file) & 0o022


@pytest.mark.parametrize("mask", [0o000, 0o077], ids=["umask-000", "umask-077"])
def test_a_snapshot_is_shareable_whatever_the_umask(tmp_path: Path, mask: int) -> None:
    from hwtune.probes.snapshot import take_snapshot

    dest = tmp_path / "new" / "snap"
    with umask(mask):
        take_snapshot(dest, gpus=False, tensorflow=False)
    for path in [tmp_path / "new", *dest.rglob("*")]:
        if path.is_symlink():
            continue
        expected = 0o755 if path.is_dir() else 0o644
        assert mode(path) == expected, (path, oct(mode(path)))


@needs_root
def test_nothing_is_created_through_another_users_link(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    (home / "out").symlink_to(root_only)
    os.chown(home, NOBODY, NOBODY)
    with pytest.raises(ApplyError, match=r"home: it is owned by"):
        apply_all(home / "out" / "new" / "dir", A, HW)
    assert list(root_only.iterdir()) == []  # not even the directories


# A directory name a hint's command must quote: unquoted, the shell split it at the space and
# ran `touch pwned` after the `;`.
PASTED = "out dir; touch pwned"


def run_pasted(command: str, cwd: Path) -> None:
    """Run a hint's command as a user pasting it into a shell would; nothing else may run."""
    cwd.mkdir(exist_ok=True)
    done = subprocess.run(["sh", "-c", command], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stderr)
    assert list(cwd.iterdir()) == [], command  # no `pwned`


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.rindex(end)]


@needs_root
@pytest.mark.parametrize("how", ["owned-by-nobody", "writable-by-all", "nobodys-in-sticky"])
def test_the_commands_in_trust_hints_fix_the_directory_they_name(tmp_path: Path, how: str) -> None:
    """The hints named the path unquoted: `chown root: /x/out dir; touch pwned` changed
    /x/out and ran `touch pwned` when pasted."""
    parent = tmp_path
    if how == "nobodys-in-sticky":
        parent = tmp_path / PASTED
        parent.mkdir()
        parent.chmod(0o1777)
    out = parent / (PASTED if how != "nobodys-in-sticky" else "out")
    out.mkdir()
    if how == "writable-by-all":
        out.chmod(0o777)
    else:
        os.chown(out, NOBODY, NOBODY)
    with pytest.raises(ApplyError) as refused:
        apply_all(out, A, HW)
    hint = str(refused.value.hint)
    if how == "writable-by-all":
        command = hint[: hint.index(", or choose")]
    elif how == "owned-by-nobody":
        command = _between(hint, "(", "), or choose")
    else:
        command = _between(hint, "(", ")")
    run_pasted(command, tmp_path / "cwd")
    apply_all(out, A, HW)  # the pasted command fixed what was refused


@needs_root
def test_the_lsattr_in_roots_immutable_hint_names_the_file(tmp_path: Path) -> None:
    out = tmp_path / PASTED
    apply_all(out, A, HW)
    env_file = out / "hwtune.env"
    if subprocess.run(["chattr", "+i", str(env_file)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable attribute (chattr +i)")
    try:
        with pytest.raises(ApplyError) as refused:
            apply_all(out, B, HW)
        hint = str(refused.value.hint)
        command = _between(hint, "(`", "`;")
        assert command.startswith("lsattr -d "), hint
        run_pasted(command, tmp_path / "cwd")
    finally:
        subprocess.run(["chattr", "-i", str(env_file)], check=True)


@needs_root
def test_the_commands_in_the_snapshot_hint_fix_the_directory(tmp_path: Path) -> None:
    from hwtune.errors import HwtuneError
    from hwtune.probes.snapshot import take_snapshot

    dest = tmp_path / PASTED
    dest.mkdir()
    os.chown(dest, NOBODY, NOBODY)
    with pytest.raises(HwtuneError) as refused:
        take_snapshot(dest, gpus=False, tensorflow=False)
    run_pasted(_between(str(refused.value.hint), "(", ")"), tmp_path / "cwd")
    take_snapshot(dest, gpus=False, tensorflow=False)
