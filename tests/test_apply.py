"""apply_all / revert: atomic, unchanged files untouched, journalled, all or nothing."""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from hwtune.apply import journal
from hwtune.apply.outputs import apply_all, revert
from hwtune.apply.render import render_all
from hwtune.errors import ApplyError
from hwtune.fs.atomic import TMP_MARK, write_atomic
from hwtune.paths import default_output_dir
from tests.apply_profiles import PYTHON, REPO, make_hardware, make_profile
from tests.conftest import run_cli

HW = make_hardware()
A = make_profile({"MODE": "a"}, intra=2)
B = make_profile({"MODE": "b", "EXTRA": "only in b"}, intra=1)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every visible file: content and mode."""
    return {
        p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(directory.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


def expected(profile: object) -> dict[str, bytes]:
    return {k: v.encode() for k, v in render_all(profile, HW).items()}  # type: ignore[arg-type]


def test_writes_every_file_mode_0644_regardless_of_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        report = apply_all(tmp_path / "out", A, HW)
    finally:
        os.umask(old)
    files = snapshot(tmp_path / "out")
    assert {k: v[0] for k, v in files.items()} == expected(A)
    assert {v[1] for v in files.values()} == {0o644}
    assert len(report.changed) == len(files) and report.journal_id


def test_unchanged_files_are_not_touched(tmp_path: Path) -> None:
    apply_all(tmp_path, A, HW)
    before = {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in tmp_path.iterdir()
        if p.is_file() and p.name[0] != "."
    }
    report = apply_all(tmp_path, A, HW)
    after = {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in tmp_path.iterdir()
        if p.is_file() and p.name[0] != "."
    }
    assert report.changed == () and report.journal_id is None
    assert before == after
    assert len(journal.entry_ids(tmp_path)) == 1


def test_dry_run_writes_nothing_and_diffs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = apply_all(out, A, HW, dry_run=True)
    assert not out.exists() and report.would_change
    assert "+++ b/hwtune.sh" in report.diff and "+export MODE='a'" in report.diff
    assert "+++ b/hwtune.env" in report.diff and '+MODE="a"' in report.diff
    apply_all(out, A, HW)
    (out / "hwtune.json").chmod(0o666)
    report = apply_all(out, A, HW, dry_run=True)
    assert [p.name for p in report.changed] == ["hwtune.json"]
    assert "mode of hwtune.json becomes 0644" in report.diff


@pytest.mark.parametrize("private", [0o600, 0o640, 0o604])
def test_a_file_the_user_made_private_stays_private(tmp_path: Path, private: int) -> None:
    """`--set API_TOKEN=...` puts a value in hwtune.env; a user who chmods it 600 must not
    find the next apply (or the daemon's) making it world-readable again."""
    apply_all(tmp_path, A, HW)
    (tmp_path / "hwtune.env").chmod(private)
    assert apply_all(tmp_path, A, HW).changed == ()  # the mode is no change to undo
    apply_all(tmp_path, B, HW)  # new bytes: written with the user's mode
    files = snapshot(tmp_path)
    assert files["hwtune.env"] == (expected(B)["hwtune.env"], private)
    assert files["hwtune.sh"][1] == 0o644  # the files the user left alone keep hwtune's mode


@pytest.mark.parametrize(("private", "written"), [(0o400, 0o600), (0o000, 0o600), (0o440, 0o640)])
def test_a_private_file_without_owner_write_stays_private(
    tmp_path: Path, private: int, written: int
) -> None:
    """A file its owner also made read-only (chmod 400) or unreadable (000) is no less
    private: the next apply gave it hwtune's 0644, readable by everyone, secrets included.
    Owner read/write come back (apply rewrites it); what others were refused stays refused."""
    apply_all(tmp_path, A, HW)
    (tmp_path / "hwtune.env").chmod(private)
    apply_all(tmp_path, B, HW)
    assert snapshot(tmp_path)["hwtune.env"] == (expected(B)["hwtune.env"], written)


def test_revert_restores_previous_files_exactly(tmp_path: Path) -> None:
    (tmp_path / "hwtune.env").write_text("# my own file\nexport X=1\n")
    (tmp_path / "hwtune.env").chmod(0o600)
    (tmp_path / "unrelated.txt").write_text("keep me")
    before = snapshot(tmp_path)
    apply_all(tmp_path, A, HW)
    apply_all(tmp_path, B, HW)
    assert snapshot(tmp_path)["hwtune.env"][0] == expected(B)["hwtune.env"]
    entry_id, _, _ = revert(tmp_path)
    after_one = {k: v[0] for k, v in snapshot(tmp_path).items() if k != "unrelated.txt"}
    assert entry_id and after_one == expected(A)
    revert(tmp_path)
    assert snapshot(tmp_path) == before  # created files removed, the user's file and mode back
    assert revert(tmp_path) == (None, [], ())


def test_revert_refuses_edited_files_unless_forced(tmp_path: Path) -> None:
    apply_all(tmp_path, A, HW)
    (tmp_path / "hwtune.env").write_text("edited by hand\n")
    with pytest.raises(ApplyError, match=r"hwtune\.env.*changed after apply"):
        revert(tmp_path)
    assert (tmp_path / "hwtune.env").read_text() == "edited by hand\n"
    revert(tmp_path, force=True)
    assert snapshot(tmp_path) == {}


def test_journal_keeps_the_newest_entries(tmp_path: Path) -> None:
    for i in range(journal.KEEP + 3):
        apply_all(tmp_path, make_profile({"N": str(i)}), HW)
    assert len(journal.entry_ids(tmp_path)) == journal.KEEP


def test_the_journal_order_survives_a_clock_stepped_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NTP or a restored VM can set the clock back: the newest apply must stay the one that
    `revert` undoes, and must not be the one `prune` deletes."""
    for i in range(journal.KEEP):
        apply_all(tmp_path, make_profile({"N": str(i)}), HW)
    apply_all(tmp_path, B, HW)
    monkeypatch.setattr(journal.time, "time_ns", lambda: 10**9)  # back to 1970
    newest = apply_all(tmp_path, A, HW).journal_id
    assert newest in journal.entry_ids(tmp_path)
    latest = journal.latest(tmp_path)
    assert latest is not None and latest.id == newest
    entry_id, _, _ = revert(tmp_path)
    assert entry_id == newest
    assert snapshot(tmp_path)["hwtune.env"][0] == expected(B)["hwtune.env"]


def test_stale_temporaries_are_cleaned_by_the_next_apply(tmp_path: Path) -> None:
    stale = tmp_path / f".hwtune.env{TMP_MARK}999-1"
    stale.write_text("half a file")
    apply_all(tmp_path, A, HW)
    assert not stale.exists()


KILL_MIDWAY = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from hwtune.apply.outputs import apply_all
    from tests.apply_profiles import make_hardware, make_profile
    profile = make_profile({{"MODE": "b", "EXTRA": "only in b"}}, intra=1)
    def die(path):
        if path.name == {victim!r}:
            os.kill(os.getpid(), signal.SIGKILL)
    apply_all(Path({out!r}), profile, make_hardware(), on_written=die)
    """
)


@pytest.mark.parametrize("then", ["apply", "revert"])
def test_apply_killed_midway_is_rolled_back(tmp_path: Path, then: str) -> None:
    apply_all(tmp_path, A, HW)
    before = snapshot(tmp_path)
    script = KILL_MIDWAY.format(repo=str(REPO), victim="hwtune.json", out=str(tmp_path))
    child = subprocess.run([PYTHON, "-c", script], capture_output=True, timeout=60)
    assert child.returncode == -9, child.stderr.decode()
    mixed = snapshot(tmp_path)
    assert mixed["hwtune.env"][0] == expected(B)["hwtune.env"]  # killed after some files…
    assert mixed["profile.json"] == before["profile.json"]  # …and before others
    if then == "apply":
        report = apply_all(tmp_path, B, HW)
        assert report.recovered and {k: v[0] for k, v in snapshot(tmp_path).items()} == expected(B)
        revert(tmp_path)
    else:
        entry_id, _, recovered = revert(tmp_path)
        assert recovered == (entry_id,)
    assert snapshot(tmp_path) == before


INTERRUPT_MIDWAY = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    import hwtune.apply.outputs as outputs
    from hwtune.cli import main
    real = outputs.write_atomic
    def write_then_interrupt(path, data, **kw):
        real(path, data, **kw)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C after the first file is replaced
    outputs.write_atomic = write_then_interrupt
    sys.exit(main(["apply", "--output", {out!r}, "--set", "MODE=b"]))
    """
)


SECOND_CTRL_C_IN_A_THREADED_PROGRAM = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    sys.path.insert(0, {repo!r})
    import hwtune.apply.outputs as outputs
    from hwtune.cli import main
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # takes the signal
    real_write, real_restore = outputs.write_atomic, outputs.journal.restore
    def write_then_interrupt(path, data, **kw):
        real_write(path, data, **kw)
        os.kill(os.getpid(), signal.SIGINT)
    def restore_interrupted(*args, **kw):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again, while rolling back
        time.sleep(0.2)  # the other thread's C handler runs; Python's would now, in main
        return real_restore(*args, **kw)
    outputs.write_atomic = write_then_interrupt
    outputs.journal.restore = restore_interrupted
    sys.exit(main(["apply", "--output", {out!r}, "--set", "MODE=b"]))
    """
)


def _interrupted_apply_is_rolled_back(tmp_path: Path, script: str) -> None:
    """Apply set a, then run `script` (an apply of set b that Ctrl-C interrupts) in a child:
    it exits 130 saying the files were restored, and set a is back with only its entry."""
    assert run_cli(["apply", "--output", str(tmp_path), "--set", "MODE=a"]).exit_status == 0
    before = snapshot(tmp_path)
    code = script.format(repo=str(REPO), out=str(tmp_path))
    child = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 130, child.stderr
    assert "interrupted; the 1 file(s) already replaced were restored" in child.stderr
    assert snapshot(tmp_path) == before
    assert len(journal.entry_ids(tmp_path)) == 1  # only the first apply's entry
    assert not [p for p in tmp_path.iterdir() if TMP_MARK in p.name]


def test_a_second_ctrl_c_waits_for_the_roll_back_in_a_threaded_program(tmp_path: Path) -> None:
    """With another thread running, masking the main thread's signals alone let the second
    SIGINT interrupt the roll-back; the previous set must still be back, and said so."""
    _interrupted_apply_is_rolled_back(tmp_path, SECOND_CTRL_C_IN_A_THREADED_PROGRAM)


def test_ctrl_c_midway_puts_the_previous_set_back_at_once(tmp_path: Path) -> None:
    """A real SIGINT between two renames: the files already replaced go back before hwtune
    exits 130, and it says so; nothing waits for the next apply to be rolled back."""
    _interrupted_apply_is_rolled_back(tmp_path, INTERRUPT_MIDWAY)


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=False)


def test_read_only_file_system_leaves_files_intact(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    _mount_tmpfs(out, "1m")
    try:
        apply_all(out, A, HW)
        before = snapshot(out)
        subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
        with pytest.raises(ApplyError) as err:
            apply_all(out, B, HW)
        assert (
            "Read-only file system" in err.value.message
            and "nothing was changed" in err.value.message
        )
        assert snapshot(out) == before
        report = apply_all(out, A, HW)  # the same profile: nothing to write, so up to date
        assert not report.changed and report.journal_id is None
        assert snapshot(out) == before
    finally:
        _umount(out)


def _fill(directory: Path) -> None:
    """Use every free page of a tmpfs."""
    fd = os.open(directory / ".filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


@pytest.mark.parametrize("free_pages", range(0, 14, 2))
def test_disk_full_is_all_or_nothing(tmp_path: Path, free_pages: int) -> None:
    """With k pages free, an apply either completes or leaves the previous set exactly."""
    out = tmp_path / "small"
    _mount_tmpfs(out, "256k")
    try:
        apply_all(out, A, HW)
        before = snapshot(out)
        _fill(out)
        filler = out / ".filler"
        os.truncate(filler, max(0, filler.stat().st_size - free_pages * 4096))
        try:
            apply_all(out, B, HW)
        except ApplyError as err:
            assert "No space left on device" in err.message
            assert snapshot(out) == before
            assert journal.entry_ids(out) == journal.entry_ids(out)[:1]  # the failed one is gone
        else:
            assert {k: v[0] for k, v in snapshot(out).items()} == expected(B)
        assert not [p for p in out.iterdir() if TMP_MARK in p.name]
    finally:
        _umount(out)


def test_a_failed_write_reports_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "ro"
    _mount_tmpfs(out, "1m")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
        result = run_cli(["apply", "--output", str(out)])
        assert result.exit_status == 1
        assert "Read-only file system" in result.stderr and "hint:" in result.stderr
    finally:
        _umount(out)


CONCURRENT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from hwtune.apply.outputs import apply_all
    from tests.apply_profiles import make_hardware, make_profile
    hw = make_hardware()
    for round in range(6):
        apply_all(Path({out!r}), make_profile({{"WRITER": "{name}-" + str(round)}}), hw)
    """
)


def test_concurrent_applies_serialise(tmp_path: Path) -> None:
    """Every journal entry's previous version is exactly what the entry before it wrote:
    no apply read the directory while another was halfway through writing it."""
    children = [
        subprocess.Popen(
            [PYTHON, "-c", CONCURRENT.format(repo=str(REPO), out=str(tmp_path), name=n)]
        )
        for n in "abcd"
    ]
    assert [c.wait(timeout=120) for c in children] == [0, 0, 0, 0]
    ids = journal.entry_ids(tmp_path)
    assert len(ids) == journal.KEEP
    entries = [journal.load(tmp_path, i) for i in ids]
    for earlier, later in itertools.pairwise(entries):
        wrote = {f.name: f.new_sha256 for f in earlier.files}
        for f in later.files:
            backup = (later.directory(tmp_path) / "files" / f.name).read_bytes()
            assert journal.sha256(backup) == wrote[f.name], (
                f"{later.id}: {f.name} was not what {earlier.id} wrote"
            )
    final = {f.name: f.new_sha256 for f in entries[-1].files}
    assert {k: journal.sha256(v[0]) for k, v in snapshot(tmp_path).items() if k in final} == final


HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from hwtune.fs.atomic import locked
    with locked(Path({out!r})):
        print("held", flush=True)
        time.sleep(60)
    """
)


def test_lock_timeout_exits_locked(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [PYTHON, "-c", HOLD_LOCK.format(repo=str(REPO), out=str(tmp_path))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = run_cli(["apply", "--output", str(tmp_path), "--lock-timeout", "0.2"])
        assert result.exit_status == 6
        assert f"(pid {holder.pid})" in result.stderr and "nothing was changed" in result.stderr
        assert snapshot(tmp_path) == {}
    finally:
        holder.kill()
        holder.wait()


FLOCK = shutil.which("flock")


def _gone_pid() -> int:
    """The pid of a process that has exited (the stale holder an old lock file records)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def _flocked_by(path: Path) -> subprocess.Popen[str]:
    """`flock PATH sleep 60`, started and holding: a holder that is not hwtune."""
    assert FLOCK is not None
    holder = subprocess.Popen(
        [FLOCK, str(path), "sh", "-c", "echo held; exec sleep 60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.skipif(FLOCK is None, reason="needs flock(1)")
def test_lock_timeout_names_no_stale_pid_for_a_foreign_holder(tmp_path: Path) -> None:
    """A lock held by a process that is not hwtune: the message said "another hwtune apply
    (pid N)" with N the last hwtune that wrote the lock file, long gone."""
    stale = _gone_pid()
    (tmp_path / ".lock").write_text(f"{stale}\n")
    (tmp_path / ".lock").chmod(0o600)
    holder = _flocked_by(tmp_path / ".lock")
    try:
        result = run_cli(["apply", "--output", str(tmp_path), "--lock-timeout", "0.2"])
        assert result.exit_status == 6
        assert "another hwtune apply" not in result.stderr, result.stderr
        assert f"pid {stale})" not in result.stderr, result.stderr
        # flock(1) itself takes the lock and waits for its command (/proc/locks names it).
        assert f"another process (pid {holder.pid}) holds" in result.stderr, result.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.skipif(FLOCK is None, reason="needs flock(1)")
def test_daemon_lock_names_no_stale_pid_for_a_foreign_holder(tmp_path: Path) -> None:
    from hwtune.daemon.instance import AlreadyRunning, hold_output

    stale = _gone_pid()
    lock = tmp_path / ".daemon.lock"
    lock.write_text(f"{stale}\n")
    lock.chmod(0o600)
    holder = _flocked_by(lock)
    try:
        with pytest.raises(AlreadyRunning) as refused:
            hold_output(tmp_path)
        message = refused.value.message
        assert "hwtune daemon" not in message and f"pid {stale})" not in message, message
        assert message.startswith(f"another process (pid {holder.pid}) holds {lock}"), message
    finally:
        holder.kill()
        holder.wait()


def test_flock_holders_are_read_from_proc_locks_lines() -> None:
    from hwtune.fs.holder import parse_flock_holders, parse_is_hwtune

    text = (
        "1: FLOCK  ADVISORY  WRITE 30183 fe:00:2154517 0 EOF\n"
        "1: -> FLOCK  ADVISORY  WRITE 40000 fe:00:2154517 0 EOF\n"
        "2: POSIX  ADVISORY  WRITE 512 fe:00:2154517 0 EOF\n"
        "3: FLOCK  ADVISORY  WRITE 777 fe:01:2154517 0 EOF\n"
    )
    assert parse_flock_holders(text, os.makedev(0xFE, 0), 2154517) == {30183}
    assert parse_is_hwtune(b"/usr/bin/python3\0-m\0hwtune\0apply\0")
    assert parse_is_hwtune(b"/usr/bin/python3\0/usr/local/bin/hwtune\0daemon\0")
    assert not parse_is_hwtune(b"flock\0/srv/hwtune\0sleep\0")
    assert not parse_is_hwtune(b"flock\0/tmp/hwtune-out/.lock\0sleep\0")


def test_cli_dry_run_diff_apply_revert(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    dry = run_cli(["apply", "--output", out, "--dry-run"])
    assert dry.exit_status == 4 and "would be created:" in dry.stdout and not Path(out).exists()
    first = run_cli(["apply", "--output", out])
    assert first.exit_status == 0 and "journal:" in first.stdout
    # New files are "created", never "updated".
    assert f"created: {out}/hwtune.env" in first.stdout and "updated:" not in first.stdout
    again = run_cli(["apply", "--output", out, "--diff"])
    assert again.exit_status == 0 and "up to date" in again.stdout
    changed = run_cli(["apply", "--output", out, "--diff", "--set", "HW_TEST=1"])
    assert changed.exit_status == 4 and "+export HW_TEST='1'" in changed.stdout
    assert f"would be updated: {out}/hwtune.env" in changed.stdout
    assert "created" not in changed.stdout
    written = run_cli(["apply", "--output", out, "--set", "HW_TEST=1"])
    assert f"updated: {out}/hwtune.env" in written.stdout and "created" not in written.stdout
    run_cli(["revert", "--output", out])
    undo = run_cli(["revert", "--output", out])
    assert undo.exit_status == 0 and "reverted apply" in undo.stdout
    assert [p for p in Path(out).iterdir() if not p.name.startswith(".")] == []


def test_output_that_is_a_file_is_not_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("mine")
    for argv in (["apply"], ["apply", "--dry-run"], ["revert"]):
        result = run_cli([*argv, "--output", str(target)])
        assert result.exit_status == 2, result.stderr
        assert f"--output {target}: not a directory" in result.stderr
    assert target.read_text() == "mine"


def test_default_output_dir() -> None:
    assert default_output_dir({}, euid=0) == Path("/etc/hwtune")
    assert default_output_dir({"XDG_CONFIG_HOME": "/x/cfg"}, euid=1000) == Path("/x/cfg/hwtune")
    assert default_output_dir({"XDG_CONFIG_HOME": "rel", "HOME": "/home/u"}, euid=1000) == Path(
        "/home/u/.config/hwtune"
    )


def test_write_atomic_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"old")
    with pytest.raises(ApplyError, match="could not create a temporary file"):
        write_atomic(tmp_path / "missing-dir" / "f", b"new")
    assert target.read_bytes() == b"old"


def test_an_output_the_plan_no_longer_has_is_removed_and_revertible(tmp_path: Path) -> None:
    apply_all(tmp_path, A, HW)
    without = make_profile({"MODE": "a"}, intra=2, bazelrc=None)
    report = apply_all(tmp_path, without, HW, dry_run=True)
    assert sorted(p.name for p in report.changed) == ["profile.json", "tensorflow.bazelrc"]
    assert "+++ /dev/null" in report.diff
    apply_all(tmp_path, without, HW)
    assert not (tmp_path / "tensorflow.bazelrc").exists()
    assert apply_all(tmp_path, without, HW).changed == ()
    revert(tmp_path)
    assert (tmp_path / "tensorflow.bazelrc").read_bytes() == expected(A)["tensorflow.bazelrc"]


def test_a_journal_entry_without_manifest_is_cleaned(tmp_path: Path) -> None:
    """An apply killed while journalling (links made, no manifest) replaced nothing."""
    apply_all(tmp_path, A, HW)
    half = tmp_path / journal.JOURNAL_DIR / "99999999999999999999-1" / "files"
    half.mkdir(parents=True)
    os.link(tmp_path / "hwtune.env", half / "hwtune.env")
    before = snapshot(tmp_path)
    assert apply_all(tmp_path, A, HW).changed == ()
    assert not half.parent.exists() and snapshot(tmp_path) == before
