"""`apply_all`: render a profile and write every output file, all or nothing.

Order of work, under the directory lock: roll back an apply that was killed midway, compare
each rendered file with what is on disk (content and mode), journal the previous versions of
the files that change, replace them one by one atomically, then mark the journal complete. If a
write fails (read-only file system, disk full, permissions), the files already replaced in this
run are put back from the journal, so the directory holds the previous set exactly, and an
`ApplyError` says which file failed and why.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwtune.apply import journal
from hwtune.errors import ApplyError
from hwtune.fs.atomic import (
    ensure_dir,
    failure,
    locked,
    remove_durably,
    remove_stale_temporaries,
    write_atomic,
)
from hwtune.fs.guard import check_directory, check_journal_directory, read_regular
from hwtune.models.hardware import Hardware
from hwtune.models.profile import Profile

FILE_MODE = 0o644


def file_mode(current: int | None) -> int:
    """The mode a written file gets: FILE_MODE, or the mode the user gave the file where it
    only takes access away from it (0600, 0640: a value passed with --set may be a secret),
    so that an apply never makes a file the user protected readable again. Owner read/write
    are given back (0400 and 0000 become 0600, 0440 becomes 0640), since apply and revert
    rewrite the file; before, such a file became 0644, readable by everyone."""
    if current is not None and current & ~FILE_MODE == 0:
        return current | 0o600
    return FILE_MODE


@dataclass(frozen=True)
class ApplyReport:
    """What an apply changed (or, with dry_run, would change)."""

    output_dir: Path
    changed: tuple[Path, ...]
    unchanged: tuple[Path, ...]
    diff: str  # unified diff of the changed files, old -> new
    journal_id: str | None  # None when nothing changed or on a dry run
    dry_run: bool = False
    recovered: tuple[str, ...] = ()  # journal ids of interrupted applies rolled back first
    created: tuple[Path, ...] = ()  # of `changed`: files that did not exist
    removed: tuple[Path, ...] = ()  # of `changed`: files this profile no longer has
    edited: tuple[Path, ...] = ()  # of `changed`: hand edits replaced (with dry_run: that
    # would be), kept in the journal
    dropped_edits: tuple[journal.JournalEntry, ...] = ()  # older kept edits rotated out

    def verb(self, path: Path) -> str:
        """What happens to a changed file: created, updated or removed."""
        return (
            "created" if path in self.created else "removed" if path in self.removed else "updated"
        )

    @property
    def would_change(self) -> bool:
        return bool(self.changed)


def _current(path: Path) -> tuple[bytes | None, int | None]:
    """What is at `path` now; a link or anything but a regular file is refused (ApplyError),
    and a link is never followed, so a diff never shows another file's contents."""
    try:
        found = read_regular(path)
    except ApplyError:
        raise
    except OSError as err:
        raise failure("read", path, err) from err
    return (None, None) if found is None else found


def _mode_now(path: Path) -> int:
    """The mode to write `path` with (`file_mode` of what is there now; no link is followed)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return FILE_MODE
    return file_mode(stat.S_IMODE(info.st_mode) if stat.S_ISREG(info.st_mode) else None)


def _diff(name: str, old: bytes | None, new: bytes | None, mode: int = FILE_MODE) -> str:
    def lines(data: bytes | None) -> list[str]:
        return [] if data is None else data.decode("utf-8", "replace").splitlines(keepends=True)

    text = "".join(
        difflib.unified_diff(
            lines(old),
            lines(new),
            fromfile="/dev/null" if old is None else f"a/{name}",
            tofile="/dev/null" if new is None else f"b/{name}",
        )
    )
    if old is not None and not text:  # same bytes, different mode
        text = f"mode of {name} becomes {mode:04o}\n"
    return text if text.endswith("\n") or not text else text + "\n\\ No newline at end of file\n"


def apply_files(
    output_dir: Path,
    files: Mapping[str, bytes | None],
    *,
    dry_run: bool = False,
    lock_timeout: float = 30.0,
    on_written: Callable[[Path], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> ApplyReport:
    """Write `files` (name -> bytes; None: remove it if present) into `output_dir`
    atomically, journalled, all or nothing.

    `on_written(path)` is called after each file is replaced or removed (progress reporting);
    `while_waiting()` between tries while another process holds the lock (`fs.atomic.locked`).
    """
    for name in files:
        if "/" in name or name.startswith("."):
            raise ApplyError(f"refusing to write {name!r}: not a plain file name")
    if dry_run:
        return _plan_changes(output_dir, files, dry_run=True, recovered=(), edits=True)
    if _read_only_mount(output_dir):
        # Nothing can be written there, not even the lock, and nothing needs to be when the
        # files already hold this profile and no interrupted apply waits to be rolled back:
        # that is "up to date". Anything else goes on to fail at the lock, saying why.
        check_directory(output_dir)
        report = _plan_changes(output_dir, files, dry_run=False, recovered=())
        if not report.changed and not journal.pending(output_dir):
            return report
    with locked(output_dir, lock_timeout, while_waiting=while_waiting):
        check_journal_directory(output_dir / journal.JOURNAL_DIR)
        remove_stale_temporaries(output_dir)
        recovered = tuple(journal.recover_incomplete(output_dir))
        report = _plan_changes(output_dir, files, dry_run=False, recovered=recovered, edits=True)
        if not report.changed:
            return report
        changed = {p.name: files[p.name] for p in report.changed}
        unchanged = {name: data for name, data in files.items() if name not in changed}
        edited = {p.name for p in report.edited}
        entry = journal.begin(output_dir, changed, unchanged, edited)
        try:
            for name, data in changed.items():
                if data is None:
                    remove_durably(output_dir / name)
                else:
                    write_atomic(output_dir / name, data, mode=_mode_now(output_dir / name))
                if on_written is not None:
                    on_written(output_dir / name)
            # Finishing the entry can fail too (a full disk): then the new files are in place
            # and the entry is incomplete; it is undone here, and the message says so.
            journal.mark_complete(output_dir, entry)
        except (ApplyError, OSError) as err:
            note = _roll_back(output_dir, entry)
            message = err.message if isinstance(err, ApplyError) else str(err)
            hint = err.hint if isinstance(err, ApplyError) else None
            raise ApplyError(f"{message}{note}", hint=hint) from err
        except KeyboardInterrupt as interrupt:
            # Ctrl-C between two renames: all or nothing holds for an interrupt too, so the
            # files already replaced go back now, not at the next apply. A second Ctrl-C
            # waits until the roll-back is done (a kill -9 is still recovered by the journal).
            with _signals_held():
                note = _roll_back(output_dir, entry)
            raise KeyboardInterrupt(f"interrupted{note}") from interrupt
        dropped = journal.prune(output_dir)
        return ApplyReport(
            output_dir,
            report.changed,
            report.unchanged,
            report.diff,
            entry.id,
            False,
            recovered,
            report.created,
            report.removed,
            tuple(output_dir / f.name for f in entry.files if f.edited),
            tuple(dropped),
        )


def edit_notes(report: ApplyReport, *, daemon: bool = False) -> list[str]:
    """One line per hand edit the apply replaced (where it is kept, how to get it back), and
    per older kept edit the journal dropped. `daemon`: said by the daemon, which would write
    its profile over a reverted file again, so the way back is the kept copy or the config."""
    quoted = shlex.quote(str(report.output_dir))
    lines = []
    for path in report.edited:
        if report.dry_run:  # nothing written, so nothing kept yet
            verb = "remove" if path in report.removed else "replace"
            lines.append(
                f"would {verb} your edit of {shlex.quote(str(path))} (an apply keeps it in "
                f"the journal; `hwtune revert --output {quoted}` then restores it)"
            )
            continue
        kept = report.output_dir / journal.JOURNAL_DIR / str(report.journal_id) / "files"
        verb = "removed" if path in report.removed else "replaced"
        how = (
            "the daemon writes its profile there: set the change in hwtune's config to keep it"
            if daemon
            else f"`hwtune revert --output {quoted}` restores it"
        )
        lines.append(
            f"{verb} your edit of {shlex.quote(str(path))} "
            f"(kept as {shlex.quote(str(kept / path.name))}; {how})"
        )
    for entry in report.dropped_edits:
        names = ", ".join(f.name for f in entry.files if f.edited)
        lines.append(
            f"dropped the oldest kept edit ({names}, replaced by apply {entry.id} at "
            f"{entry.created}) from the journal of {quoted}: only the newest "
            f"{journal.KEEP_EDITS} are kept"
        )
    return lines


def _read_only_mount(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:  # not there yet: apply creates it
        return False


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while the block runs, the roll-back after a Ctrl-C.

    Masking this thread (pthread_sigmask(3)) is not enough in a program with other threads:
    the kernel hands a process-directed signal to any thread that does not block it, and
    Python then runs the handler in the main thread anyway (signal module docs, "Signals and
    threads"). So in the main thread the handlers are also swapped for a recorder. A SIGINT
    that came meanwhile is dropped (the caller raises KeyboardInterrupt next); SIGTERM and
    SIGHUP are raised again once the old handlers are back."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    came: list[int] = []
    swapped: dict[int, Any] = {}  # signal.getsignal's handlers
    if threading.current_thread() is threading.main_thread():
        for number in held:
            handler = signal.getsignal(number)
            if handler is not None:  # None: installed outside Python, cannot be put back
                swapped[number] = signal.signal(number, lambda n, _frame: came.append(n))
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # what was pending is recorded now
        for held_number, handler in swapped.items():
            signal.signal(held_number, handler)
        for came_number in dict.fromkeys(came):
            if came_number != signal.SIGINT:
                signal.raise_signal(came_number)


def _roll_back(output_dir: Path, entry: journal.JournalEntry) -> str:
    """Undo `entry` explicitly: every file it names goes back to its previous version (those
    never replaced are left alone), then the entry is removed. Returns what the error message
    must add so that it says what is on disk; the backups are hard links where possible, so
    this needs no free space."""
    try:
        restored = journal.restore(output_dir, entry, force=True)
        journal.discard(output_dir, entry)
    except (ApplyError, OSError) as again:
        return (
            f"; undoing it also failed ({again}): some new files may be in place and journal "
            f"entry {entry.id} is incomplete; the next `hwtune apply` or `hwtune revert` rolls "
            "it back and says so"
        )
    if restored:
        return (
            f"; the {len(restored)} file(s) already replaced were restored and journal entry "
            f"{entry.id} was undone: {output_dir} holds the previous set"
        )
    return f"; nothing was replaced: {output_dir} holds the previous set"


def _plan_changes(
    output_dir: Path,
    files: Mapping[str, bytes | None],
    *,
    dry_run: bool,
    recovered: tuple[str, ...],
    edits: bool = False,
) -> ApplyReport:
    changed: list[Path] = []
    unchanged: list[Path] = []
    created: list[Path] = []
    removed: list[Path] = []
    edited: list[Path] = []
    diffs: list[str] = []
    replaced: list[tuple[Path, bytes]] = []  # changed files that held something
    for name, data in files.items():
        path = output_dir / name
        old, mode = _current(path)
        if data is None and old is None:
            continue  # to be removed, and already absent
        if old == data and mode == file_mode(mode):
            unchanged.append(path)
        else:
            changed.append(path)
            diffs.append(_diff(name, old, data, file_mode(mode)))
            if old is None:
                created.append(path)
            else:
                replaced.append((path, old))
                if data is None:
                    removed.append(path)
    # `edits`: which of them are hand edits (judged here once, from the bytes just read; the
    # apply's journal entry records it), the journal read only when some file is replaced. A
    # journal that cannot be listed makes no preview fail (the apply itself reports it): no
    # edit is named then.
    if edits and replaced:
        try:
            written = journal.last_written(output_dir)
        except ApplyError:
            if not dry_run:
                raise
        else:
            edited = [p for p, old in replaced if journal.hand_edited(written, p.name, old)]
    return ApplyReport(
        output_dir,
        tuple(changed),
        tuple(unchanged),
        "".join(diffs),
        None,
        dry_run,
        recovered,
        tuple(created),
        tuple(removed),
        tuple(edited),
    )


def apply_all(
    output_dir: Path,
    profile: Profile,
    hardware: Hardware,
    *,
    dry_run: bool = False,
    lock_timeout: float = 30.0,
    on_written: Callable[[Path], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> ApplyReport:
    """Render every output of `profile` and write it to `output_dir` (see the module doc).

    An output this profile no longer has (tensorflow.bazelrc without a build plan) is
    removed, journalled like a change, so no stale file outlives its plan.
    Raises ApplyError (nothing changed, or everything rolled back) and LockTimeout.
    """
    from hwtune.apply.render import OUTPUT_FILES, render_all

    rendered: dict[str, bytes | None] = {name: None for name in OUTPUT_FILES}
    rendered.update(
        (name, text.encode("utf-8")) for name, text in render_all(profile, hardware).items()
    )
    if not dry_run:
        ensure_dir(output_dir)
    return apply_files(
        output_dir,
        rendered,
        dry_run=dry_run,
        lock_timeout=lock_timeout,
        on_written=on_written,
        while_waiting=while_waiting,
    )


def revert(
    output_dir: Path, *, force: bool = False, lock_timeout: float = 30.0
) -> tuple[str | None, list[Path], tuple[str, ...]]:
    """Undo the newest apply: (its journal id or None, the files restored, recovered ids).

    An apply that was killed midway is rolled back first, and that counts as the revert.
    """
    if not (output_dir / journal.JOURNAL_DIR).is_dir():
        return None, [], ()
    with locked(output_dir, lock_timeout):
        check_journal_directory(output_dir / journal.JOURNAL_DIR)
        remove_stale_temporaries(output_dir)
        recovered = tuple(journal.recover_incomplete(output_dir))
        if recovered:
            return recovered[0], [], recovered
        entry = journal.latest(output_dir)
        if entry is None:
            return None, [], ()
        restored = journal.restore(output_dir, entry, force=force)
        journal.discard(output_dir, entry)
        return entry.id, restored, ()
