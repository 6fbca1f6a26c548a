"""The journal of what `hwtune apply` replaced, so `hwtune revert` restores it exactly.

Layout: `OUTPUT/.journal/<id>/manifest.json` plus `OUTPUT/.journal/<id>/files/<name>`, the
previous version of each file the apply changes. The previous file is kept as a hard link to
its inode where the file system allows (same bytes, mode, owner and times, and no extra space,
so rolling back never fails for lack of space), else as a copy with the same mode.

The manifest (JSON, never pickle) is written before any output file is touched and marked
complete after the last one; an entry left incomplete by a killed apply is rolled back by the
next apply or revert. Only the newest `KEEP` entries are kept, apart from those that saved a
hand edit (`JournalFile.edited`): the newest `KEEP_EDITS` of those are kept besides, so
rotation never drops what the user wrote while the daemon or a run of applies goes on.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shlex
import shutil
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from hwtune.errors import ApplyError
from hwtune.fs.atomic import UNCHANGED, failure, fsync_dir, remove_durably, write_atomic
from hwtune.fs.guard import read_regular
from hwtune.fs.trust import make_dirs
from hwtune.models.digits import is_ascii_digits

JOURNAL_DIR = ".journal"
MANIFEST = "manifest.json"
# Enough undo depth for people, bounded for the daemon, which applies on every change.
KEEP = 20
# Entries that saved a hand edit are kept besides those: the daemon cannot add one without
# someone writing an output file, but a config-management tool fighting it can, once per
# run, so they are bounded too. Ten edits back is deeper than anyone digs by hand; the note
# says when the oldest goes.
KEEP_EDITS = 10
_LINK_UNSUPPORTED = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP}


@dataclass(frozen=True)
class JournalFile:
    name: str
    existed: bool  # False: the apply created it, so revert removes it
    new_sha256: str  # what the apply wrote, to notice later edits; "" when it removed the file
    backup: str | None = None  # "link" or "copy"; None when the file did not exist
    # The previous version was not what hwtune last wrote there (a hand edit, or a file the
    # journal has no record of): it is the user's, so rotation keeps this entry longer.
    edited: bool = False


@dataclass(frozen=True)
class JournalEntry:
    id: str
    created: str
    complete: bool
    files: tuple[JournalFile, ...]
    hwtune_version: str = ""
    # sha256 of each output this apply left as it was ("" absent): with `files`, what every
    # output held after it, so a later apply tells hwtune's own file from a hand edit even
    # when the entry that wrote the file has rotated out.
    unchanged: tuple[tuple[str, str], ...] = ()

    @property
    def edited(self) -> bool:
        """Whether this entry saved a hand edit (see `JournalFile.edited`)."""
        return any(f.edited for f in self.files)

    def directory(self, output_dir: Path) -> Path:
        return output_dir / JOURNAL_DIR / self.id


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_regular(path: Path) -> tuple[bytes, int] | None:
    """(bytes, mode) of an output file, never through a link (guard.read_regular)."""
    try:
        return read_regular(path)
    except ApplyError:
        raise
    except OSError as err:
        raise failure("read", path, err) from err


def _read_bytes(path: Path) -> bytes | None:
    found = _read_regular(path)
    return None if found is None else found[0]


def _new_id(output_dir: Path) -> str:
    """Sortable by time, and always after every entry already there: a clock stepped back
    (NTP, a restored VM) must not sort a new entry first, where `prune` would delete it and
    `revert` would undo an older apply. The pid keeps two writers apart."""
    newest = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(output_dir / JOURNAL_DIR):
            stamp = name.partition("-")[0]
            if len(stamp) == 20 and is_ascii_digits(stamp):
                newest = max(newest, int(stamp))
    return f"{max(time.time_ns(), newest + 1):020d}-{os.getpid()}"


def _manifest_bytes(entry: JournalEntry) -> bytes:
    data = {
        "id": entry.id,
        "created": entry.created,
        "hwtune": entry.hwtune_version,
        "complete": entry.complete,
        "files": [
            {
                "name": f.name,
                "existed": f.existed,
                "new_sha256": f.new_sha256,
                "backup": f.backup,
                "edited": f.edited,
            }
            for f in entry.files
        ],
        "unchanged": dict(entry.unchanged),
    }
    return (json.dumps(data, indent=2) + "\n").encode()


def begin(
    output_dir: Path,
    new_files: dict[str, bytes | None],
    unchanged: Mapping[str, bytes | None] | None = None,
    edited: Collection[str] = (),
) -> JournalEntry:
    """Record the current version of each file about to be replaced (None: removed);
    `unchanged`: the outputs left as they are (name -> bytes); `edited`: the names of those
    replaced whose current version is a hand edit (`hand_edited`).

    Nothing is replaced yet."""
    from hwtune import __version__

    entry_id = _new_id(output_dir)
    directory = output_dir / JOURNAL_DIR / entry_id
    files_dir = directory / "files"
    try:
        # Every level 0700 whatever the umask (.journal, the entry, files/): Path.mkdir gave
        # the parents 0777 under umask 000, and another user could swap an entry's files.
        make_dirs(files_dir, 0o700)
    except OSError as err:
        raise failure("create the journal", directory, err, UNCHANGED) from err
    records: list[JournalFile] = []
    try:
        for name, data in new_files.items():
            target = output_dir / name
            backup = _keep_previous(target, files_dir / name)
            new = "" if data is None else sha256(data)
            records.append(JournalFile(name, backup is not None, new, backup, name in edited))
        entry = JournalEntry(
            entry_id,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            False,
            tuple(records),
            __version__,
            tuple(
                (name, "" if data is None else sha256(data))
                for name, data in (unchanged or {}).items()
            ),
        )
        write_atomic(directory / MANIFEST, _manifest_bytes(entry), mode=0o600)
        fsync_dir(output_dir / JOURNAL_DIR)
    except (ApplyError, OSError) as err:
        shutil.rmtree(directory, ignore_errors=True)
        cause = err.__cause__ if isinstance(err, ApplyError) else err
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(err)
        raise ApplyError(
            f"could not write the journal in {output_dir}: {reason}; nothing was changed",
            hint=err.hint if isinstance(err, ApplyError) else None,
        ) from err
    return entry


def _keep_previous(target: Path, backup: Path) -> str | None:
    try:
        os.link(target, backup, follow_symlinks=False)
        return "link"
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno not in _LINK_UNSUPPORTED:
            raise failure("keep the previous version of", target, err) from err
    found = _read_regular(target)
    if found is None:
        return None
    data, mode = found
    write_atomic(backup, data, mode=mode)
    return "copy"


def mark_complete(output_dir: Path, entry: JournalEntry) -> JournalEntry:
    """Mark `entry` complete. ApplyError when the manifest cannot be rewritten (a full disk):
    the new files are then in place and the entry is still incomplete, which the caller must
    finish or undo (outputs.apply_files undoes it)."""
    done = replace(entry, complete=True)
    manifest = entry.directory(output_dir) / MANIFEST
    try:
        write_atomic(manifest, _manifest_bytes(done), mode=0o600)
    except ApplyError as err:
        cause = err.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(err)
        raise ApplyError(
            f"could not mark journal entry {entry.id} complete ({manifest}: {reason})",
            hint=err.hint,
        ) from err
    return done


def load(output_dir: Path, entry_id: str) -> JournalEntry:
    path = output_dir / JOURNAL_DIR / entry_id / MANIFEST
    try:
        data = json.loads(path.read_text())
        files = tuple(
            JournalFile(
                str(f["name"]),
                _strict_bool(f["existed"], "existed"),
                str(f["new_sha256"]),
                f.get("backup"),
                _strict_bool(f.get("edited", False), "edited"),
            )
            for f in data["files"]
        )
        kept = data.get("unchanged", {})
        if not isinstance(kept, dict):
            raise ValueError(f"'unchanged' is {str(kept)[:20]!r}, not an object")
        for f in files:  # a manifest must not name files outside the output directory
            if "/" in f.name or f.name in ("", ".", ".."):
                raise ValueError(f"bad file name {f.name!r}")
        # The entry is its directory: restore reads the backups there and discard removes
        # it. An "id" in the manifest that names another directory (an entry copied with
        # `cp -a`, a damaged file) made both act on that other directory, so the entry was
        # "rolled back" by every apply and revert and never removed, and revert never
        # reached the applies before it.
        return JournalEntry(
            entry_id,
            str(data.get("created", "")),
            _strict_bool(data["complete"], "complete"),
            files,
            str(data.get("hwtune", "")),
            tuple((str(name), str(digest)) for name, digest in kept.items()),
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ApplyError(
            f"journal entry {path} is unreadable: {err}",
            hint=f"remove {path.parent} if it is damaged; the output files are not affected",
        ) from err


def _strict_bool(value: object, key: str) -> bool:
    """A JSON true or false; bool() would read the string "false" (or 1, or []) as a value."""
    if type(value) is not bool:
        raise ValueError(f"{key!r} is {str(value)[:20]!r}, not true or false")
    return value


def entry_ids(output_dir: Path) -> list[str]:
    """Journal entry ids, oldest first."""
    try:
        names = os.listdir(output_dir / JOURNAL_DIR)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise failure("list the journal in", output_dir, err, UNCHANGED) from err
    return sorted(n for n in names if (output_dir / JOURNAL_DIR / n / MANIFEST).is_file())


def latest(output_dir: Path) -> JournalEntry | None:
    ids = entry_ids(output_dir)
    return load(output_dir, ids[-1]) if ids else None


def restore(
    output_dir: Path,
    entry: JournalEntry,
    *,
    force: bool = False,
    names: Iterable[str] | None = None,
    keep_edits: bool = False,
) -> list[Path]:
    """Put back the previous version of each file in `entry` (or only `names`).

    Without `force`, a file changed since the apply wrote it (edited by hand, or rewritten by
    an apply that is no longer journalled) is not overwritten: ApplyError names it.
    With `keep_edits` (rolling back an interrupted apply), such a file is left as it is and
    the others are restored: an apply killed midway is undone without asking, so a file the
    user wrote after the crash must not be replaced or removed by the roll-back.
    Returns the paths that changed. Safe to repeat after an interruption.
    """
    wanted = set(names) if names is not None else None
    files = [f for f in entry.files if wanted is None or f.name in wanted]
    backups = entry.directory(output_dir) / "files"
    if keep_edits:
        files = [f for f in files if not _edited_since(output_dir / f.name, f, backups)]
    if not force:
        edited = [
            f.name
            for f in files
            if (cur := _read_bytes(output_dir / f.name)) is not None
            and (not f.new_sha256 or sha256(cur) != f.new_sha256)
            and not _already_restored(f, backups)
        ]
        if edited:
            them = "them" if len(edited) > 1 else "it"
            raise ApplyError(
                f"{', '.join(edited)} in {output_dir} changed after apply {entry.id} wrote "
                f"{them}; nothing was reverted",
                hint=f"run `hwtune revert --force --output {shlex.quote(str(output_dir))}` to "
                "restore the previous versions anyway (the edits are lost)",
            )
    changed: list[Path] = []
    try:
        for f in files:
            target = output_dir / f.name
            backup = backups / f.name
            if f.existed:
                if not os.path.lexists(backup):
                    continue  # restored already (an interrupted revert that is being repeated)
                if _still_previous(backup, target):
                    backup.unlink()  # never replaced: the apply stopped before this file
                    continue
                try:
                    os.rename(backup, target)
                except OSError as err:
                    state = f"it is still the version apply {entry.id} wrote"
                    raise failure("restore", target, err, state) from err
                fsync_dir(output_dir)
                changed.append(target)
            elif os.path.lexists(target):
                remove_durably(target)
                changed.append(target)
    except ApplyError as err:
        if not changed:
            raise
        # Files are put back one by one: say that those before the failure are back, so the
        # directory now mixes the two versions (the message said "intact" before).
        raise ApplyError(
            f"{err.message}; {', '.join(p.name for p in changed)} were restored already, so "
            f"{output_dir} mixes the files before and after apply {entry.id} until a revert "
            "or apply finishes the job (it goes on where this stopped)",
            hint=err.hint,
        ) from err
    return changed


def _still_previous(backup: Path, target: Path) -> bool:
    """Whether `target` is still the version journalled in `backup`: the same inode (a
    hard-link backup), or the same bytes and mode (a copy, kept where the file could not be
    linked: an immutable file, another file system). Renaming the copy over it would change
    nothing, and fails where the file is immutable (chattr +i refuses even root): the roll-back
    of an apply that failed at that very file then failed too, leaving an entry no apply or
    revert could finish."""
    if target.exists() and os.path.samefile(backup, target):
        return True
    try:
        found, kept = read_regular(target), read_regular(backup)
    except (ApplyError, OSError):
        return False
    return found is not None and found == kept


def _edited_since(target: Path, f: JournalFile, backups: Path) -> bool:
    """Whether `target` holds bytes that are neither what the apply wrote nor the previous
    version it journalled: someone wrote it since. A link or other non-file there is not
    content anyone keeps (guard.read_regular refuses it), and the roll-back replaces it."""
    try:
        current = _read_bytes(target)
    except ApplyError:
        return False
    if current is None or (f.new_sha256 and sha256(current) == f.new_sha256):
        return False
    backup = backups / f.name
    try:
        previous = _read_bytes(backup) if f.existed else None
    except ApplyError:
        previous = None
    return previous is None or previous != current


def _already_restored(f: JournalFile, backups: Path) -> bool:
    return f.existed and not os.path.lexists(backups / f.name)


def discard(output_dir: Path, entry: JournalEntry) -> None:
    directory = entry.directory(output_dir)
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        return
    except OSError as err:
        # The files are already as the entry's undo left them: say so, not "intact".
        raise failure(
            "remove the journal entry",
            directory,
            err,
            "the output files are as restored; the entry is left behind",
        ) from err


def last_written(output_dir: Path) -> dict[str, str]:
    """What hwtune last left in each output file, as far as the journal knows: name ->
    sha256 ("" absent), from the newest entry that names the file. A file whose bytes differ,
    or that no entry names, was written by someone else: a hand edit. An unreadable entry is
    skipped (the locked path reports it when it matters)."""
    found: dict[str, str] = {}
    for entry_id in reversed(entry_ids(output_dir)):
        try:
            entry = load(output_dir, entry_id)
        except ApplyError:
            continue
        for name, digest in (*((f.name, f.new_sha256) for f in entry.files), *entry.unchanged):
            found.setdefault(name, digest)
    return found


def hand_edited(written: Mapping[str, str], name: str, current: bytes | None) -> bool:
    """Whether `current`, the bytes in output `name` now (None: absent), is a hand edit:
    not what hwtune last left there (`written`, from `last_written`)."""
    return current is not None and written.get(name) != sha256(current)


def prune(output_dir: Path, keep: int = KEEP, keep_edits: int = KEEP_EDITS) -> list[JournalEntry]:
    """Drop all but the newest `keep` entries, not counting those that saved a hand edit, of
    which the newest `keep_edits` are kept besides. Returns the hand-edit entries dropped, for
    the caller to say so. An unreadable entry counts as one without a hand edit.

    An entry dropped after a kept one is folded into it first (`_fold`): revert walks back
    one entry at a time, and reaching the kept entry past the gap otherwise found hwtune's
    own later files "changed after apply", refusing to restore the edit without --force."""
    loaded: dict[str, JournalEntry | None] = {}
    for entry_id in entry_ids(output_dir):
        try:
            loaded[entry_id] = load(output_dir, entry_id)
        except ApplyError:
            loaded[entry_id] = None
    edits = [e for e in loaded.values() if e is not None and e.edited]
    ordinary = [i for i, e in loaded.items() if e is None or not e.edited]
    dropped = edits[: max(0, len(edits) - keep_edits)]
    kept = edits[len(dropped) :]
    for old in ordinary[: max(0, len(ordinary) - keep)]:
        later = loaded[old]
        before = [k for k in range(len(kept)) if kept[k].id < old]  # ids sort by time
        if later is not None and before:
            folded = _fold(kept[before[-1]], later)
            try:
                write_atomic(
                    folded.directory(output_dir) / MANIFEST, _manifest_bytes(folded), mode=0o600
                )
            except (ApplyError, OSError):
                continue  # kept for now; the next prune tries again
            kept[before[-1]] = folded
        shutil.rmtree(output_dir / JOURNAL_DIR / old, ignore_errors=True)
    for entry in dropped:
        shutil.rmtree(entry.directory(output_dir), ignore_errors=True)
    return dropped


def _fold(entry: JournalEntry, later: JournalEntry) -> JournalEntry:
    """`entry` taking over what `later`, an apply after it that is dropped, left in the
    output files: what revert of `entry` then expects to find there, and what `last_written`
    reads. A file `later` changed and `entry` did not stays as `later` left it on revert."""
    wrote = {f.name: f.new_sha256 for f in later.files}
    files = tuple(replace(f, new_sha256=wrote.get(f.name, f.new_sha256)) for f in entry.files)
    names = {f.name for f in entry.files}
    unchanged = dict(entry.unchanged)
    unchanged.update((name, digest) for name, digest in wrote.items() if name not in names)
    return replace(entry, files=files, unchanged=tuple(unchanged.items()))


def pending(output_dir: Path) -> bool:
    """Whether an interrupted apply waits to be rolled back (or the journal cannot be read,
    which only the locked path can report properly)."""
    journal_dir = output_dir / JOURNAL_DIR
    try:
        names = os.listdir(journal_dir)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        if any(not (journal_dir / name / MANIFEST).is_file() for name in names):
            return True
        return any(not load(output_dir, entry_id).complete for entry_id in entry_ids(output_dir))
    except (ApplyError, OSError):
        return True


def recover_incomplete(output_dir: Path) -> list[str]:
    """Roll back applies that were killed midway (call under the lock). Returns their ids.

    An entry directory without a manifest is an apply killed while journalling, before it
    replaced anything: it is only removed.
    """
    journal_dir = output_dir / JOURNAL_DIR
    with contextlib.suppress(OSError):
        for name in os.listdir(journal_dir):
            if not (journal_dir / name / MANIFEST).is_file():
                shutil.rmtree(journal_dir / name, ignore_errors=True)
    recovered: list[str] = []
    for entry_id in reversed(entry_ids(output_dir)):
        entry = load(output_dir, entry_id)
        if entry.complete:
            continue
        restore(output_dir, entry, force=True, keep_edits=True)
        discard(output_dir, entry)
        recovered.append(entry_id)
    return recovered
