"""A hand edit of an output file is never replaced silently, nor rotated out of the journal.

Real `hwtune apply` runs (run_cli) on real directories; the daemon as a real process."""

from __future__ import annotations

import shlex
from pathlib import Path

from hwtune.apply import journal
from tests.conftest import isolated_environ, run_cli
from tests.daemon_harness import DaemonProcess, build_host, replace_file, wait_for

EDIT = "# mine: keep\nTF_NUM_INTRAOP_THREADS=3\n"


def apply(out: Path, environ: dict[str, str], *args: str) -> tuple[str, str]:
    result = run_cli(["apply", "--output", str(out), *args], environ)
    assert result.exit_status == 0, result.stderr
    return result.stdout, result.stderr


def kept_edits(out: Path) -> list[str]:
    """The hand-edited versions of hwtune.env the journal holds, oldest first (this file's
    edits start with "# mine" or "# edit")."""
    found = []
    for entry_id in journal.entry_ids(out):
        kept = out / journal.JOURNAL_DIR / entry_id / "files" / "hwtune.env"
        if kept.is_file() and kept.read_text().startswith(("# mine", "# edit ")):
            found.append(kept.read_text())
    return found


def test_apply_says_it_replaced_a_hand_edit_and_how_to_get_it_back(tmp_path: Path) -> None:
    environ = isolated_environ(tmp_path)
    out = tmp_path / "my out"  # a space: the paths in the note must paste as one word
    apply(out, environ, "--set", "MODE=a")
    (out / "hwtune.env").write_text(EDIT)
    stdout, stderr = apply(out, environ, "--set", "MODE=b")
    assert f"updated: {out / 'hwtune.env'}" in stdout
    entry = journal.latest(out)
    assert entry is not None
    kept = entry.directory(out) / "files" / "hwtune.env"
    assert stderr.splitlines() == [
        f"hwtune apply: note: replaced your edit of {shlex.quote(str(out / 'hwtune.env'))} "
        f"(kept as {shlex.quote(str(kept))}; "
        f"`hwtune revert --output {shlex.quote(str(out))}` restores it)"
    ]
    assert kept.read_text() == EDIT
    # The way back it names works, and the restored edit is again the user's: replacing it
    # once more says so once more.
    assert run_cli(["revert", "--output", str(out)], environ).exit_status == 0
    assert (out / "hwtune.env").read_text() == EDIT
    assert "replaced your edit of" in apply(out, environ, "--set", "MODE=b")[1]
    # hwtune's own file replaced by hwtune: no note
    assert apply(out, environ, "--set", "MODE=c")[1] == ""


def snapshot(out: Path) -> dict[str, bytes]:
    """Every file under `out`, journal included, by relative path."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_preview_says_it_would_replace_a_hand_edit_and_writes_nothing(tmp_path: Path) -> None:
    """`apply --dry-run` and `--diff` said only "would be updated" for a file the user edited,
    while the apply itself notes "replaced your edit of …"."""
    environ = isolated_environ(tmp_path)
    out = tmp_path / "my out"
    apply(out, environ, "--set", "MODE=a")
    env_file = out / "hwtune.env"
    # hwtune's own files: a preview of a change names no edit
    for flag in ("--dry-run", "--diff"):
        result = run_cli(["apply", "--output", str(out), flag, "--set", "MODE=b"], environ)
        assert result.exit_status == 4 and result.stderr == "", result.stderr
    env_file.write_text(EDIT)
    before = snapshot(out)
    note = (
        f"hwtune apply: note: would replace your edit of {shlex.quote(str(env_file))} "
        f"(an apply keeps it in the journal; `hwtune revert --output {shlex.quote(str(out))}` "
        "then restores it)"
    )
    for flag in ("--dry-run", "--diff"):
        result = run_cli(["apply", "--output", str(out), flag, "--set", "MODE=b"], environ)
        assert result.exit_status == 4, result.stderr
        assert f"would be updated: {env_file}" in result.stdout
        assert result.stderr.splitlines() == [note], flag
        assert snapshot(out) == before  # nothing written, the journal included
    # … and the apply it previewed says it did
    assert "replaced your edit of" in apply(out, environ, "--set", "MODE=b")[1]


def test_rotation_keeps_a_hand_edit_while_applies_go_on(tmp_path: Path) -> None:
    """The journal kept the newest 20 entries whatever they held: 20 more applies (a daemon
    following the machine) dropped the only copy of the user's edit. Revert must still reach
    it, one entry at a time, as it reaches any other."""
    environ = isolated_environ(tmp_path)
    out = tmp_path / "out"
    apply(out, environ, "--set", "N=0")
    (out / "hwtune.env").write_text(EDIT)
    apply(out, environ, "--set", "N=1")
    for i in range(2, journal.KEEP + 5):
        assert apply(out, environ, "--set", f"N={i}")[1] == ""
    assert kept_edits(out) == [EDIT]
    assert len(journal.entry_ids(out)) == journal.KEEP + 1  # the 20 newest, and the edit
    # tf_config.pbtxt was last written by an entry rotated out since: what later entries
    # recorded of it still tells hwtune's own file from a hand edit.
    assert apply(out, environ, "--mode", "latency", "--set", "N=x")[1] == ""
    # Revert walks back to it past the entries rotation dropped, without --force: those
    # entries' files were hwtune's own, not edits to protect.
    for _ in range(journal.KEEP + 1):
        result = run_cli(["revert", "--output", str(out)], environ)
        assert result.exit_status == 0, result.stderr
    assert (out / "hwtune.env").read_text() == EDIT


def test_kept_edits_are_bounded_and_the_oldest_dropped_is_said(tmp_path: Path) -> None:
    """A tool fighting hwtune (rewriting the file before every apply) cannot grow the journal
    without limit: the newest KEEP_EDITS edits stay, and dropping one is said."""
    environ = isolated_environ(tmp_path)
    out = tmp_path / "out"
    apply(out, environ, "--set", "N=0")
    for i in range(journal.KEEP_EDITS + 1):
        (out / "hwtune.env").write_text(f"# edit {i}\n")
        _, stderr = apply(out, environ, "--set", f"N={i + 1}")
    assert kept_edits(out) == [f"# edit {i}\n" for i in range(1, journal.KEEP_EDITS + 1)]
    dropped = [line for line in stderr.splitlines() if "dropped" in line]
    assert len(dropped) == 1, stderr
    assert dropped[0].startswith("hwtune apply: note: dropped the oldest kept edit (hwtune.env")
    assert f"only the newest {journal.KEEP_EDITS} are kept" in dropped[0]


def test_the_daemon_log_says_it_replaced_a_hand_edit(tmp_path: Path) -> None:
    """The daemon re-applies when the machine (here its config) changes, over the edit."""
    host = build_host(tmp_path / "root")
    d = DaemonProcess(tmp_path, host.root, tmp_path / "out")
    try:
        d.start()
        d.wait_ready()
        env_file = d.output / "hwtune.env"
        replace_file(env_file, EDIT)
        d.config.parent.mkdir(parents=True)
        replace_file(d.config, '[env]\nFOLLOWED = "1"\n')
        wait_for(
            lambda: "replaced your edit of" in d.log(), f"the note in the log:\n{d.log()}", 10
        )
        assert env_file.read_text() != EDIT  # the daemon keeps its profile there
        line = next(x for x in d.log().splitlines() if "replaced your edit" in x)
        assert f"replaced your edit of {env_file} (kept as {d.output}/.journal/" in line
        assert "set the change in hwtune's config to keep it" in line
        assert kept_edits(d.output) == [EDIT]
        assert d.stop() == 0
    finally:
        d.close()
