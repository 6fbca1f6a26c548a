"""Issue 15 item 10: the disk fills up after the last file is written, while the journal entry
is being marked complete. The message must say what is on disk, and no incomplete entry may be
left for the next apply or revert to roll back behind the user's back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hwtune.apply import journal
from hwtune.apply.outputs import apply_all, revert
from hwtune.errors import ApplyError
from tests.apply_profiles import make_hardware, make_profile
from tests.test_apply import _fill, _mount_tmpfs, _umount, expected, snapshot

HW = make_hardware()
A = make_profile({"MODE": "a"}, intra=2)
B = make_profile({"MODE": "b", "EXTRA": "only in b"}, intra=1)


def _fill_after_last(out: Path, count: int) -> object:
    seen: list[Path] = []

    def on_written(path: Path) -> None:
        seen.append(path)
        if len(seen) == count:  # every new file is in place: only the journal is left
            _fill(out)

    return on_written


def test_disk_full_while_finishing_the_journal_is_undone_and_said(tmp_path: Path) -> None:
    out = tmp_path / "small"
    _mount_tmpfs(out, "1m")
    try:
        apply_all(out, A, HW)
        before = snapshot(out)
        count = len(apply_all(out, B, HW, dry_run=True).changed)
        with pytest.raises(ApplyError) as caught:
            apply_all(out, B, HW, on_written=_fill_after_last(out, count))  # type: ignore[arg-type]
        message = caught.value.message
        assert "No space left on device" in message and "complete" in message, message
        assert "previous set" in message and "restored" in message, message
        # ... and it is so: the previous files, and no incomplete entry for later.
        assert snapshot(out) == before
        entries = [journal.load(out, i) for i in journal.entry_ids(out)]
        assert all(e.complete for e in entries), entries
        os.unlink(out / ".filler")
        report = apply_all(out, B, HW)
        assert report.recovered == ()
        assert {k: v[0] for k, v in snapshot(out).items()} == expected(B)
        assert revert(out)[2] == ()
    finally:
        _umount(out)


def test_an_injected_enospc_at_mark_complete_leaves_the_previous_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without root: OSError(ENOSPC) exactly where the manifest is rewritten."""
    import errno

    out = tmp_path / "out"
    apply_all(out, A, HW)
    before = snapshot(out)
    real = journal.write_atomic

    def full(path: Path, data: bytes, **kwargs: object) -> None:
        if path.name == journal.MANIFEST and b'"complete": true' in data:
            from hwtune.fs.atomic import failure

            raise failure("write", path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        real(path, data, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(journal, "write_atomic", full)
    with pytest.raises(ApplyError, match="previous set") as caught:
        apply_all(out, B, HW)
    assert "No space left" in caught.value.message
    monkeypatch.undo()
    assert snapshot(out) == before
    assert all(journal.load(out, i).complete for i in journal.entry_ids(out))
    assert apply_all(out, B, HW).recovered == ()
