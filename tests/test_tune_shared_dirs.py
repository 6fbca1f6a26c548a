"""`hwtune tune` as root beside other users: its lock and stored results in shared directories.

The other user is `nobody`, acting through `setpriv` as in tests/test_configure_shared_dirs.py:
with $XDG_CACHE_HOME or $XDG_STATE_HOME in a shared sticky directory, their `hwtune` link
there led root's lock, results and --forget into a directory of their choice.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwtune.errors import TuneError
from hwtune.pipeline.measured import forget
from tests.conftest import isolated_environ, run_cli
from tests.test_configure_shared_dirs import _shared, needs_root

# A workload that prints its metric at once: the refusals come before any trial runs.
QUICK = ["--", sys.executable, "-c", "print('hwtune-metric: samples_per_sec=1')"]
THEIRS = "hwtune in it belongs to nobody (uid 65534)"


@pytest.fixture
def victim() -> Iterator[Path]:
    """The directory another user's link leads to, in a sticky directory like /tmp (pytest's
    tmp_path is root's alone, 0700: nobody could not make a link there)."""
    scratch = Path(tempfile.mkdtemp(prefix="hwtune-shared-test-"))
    scratch.chmod(0o1777)
    (scratch / "victim").mkdir()
    try:
        yield scratch / "victim"
    finally:
        shutil.rmtree(scratch)


@needs_root
@pytest.mark.parametrize(
    ("variable", "said"),
    [
        ("XDG_CACHE_HOME", "cannot take the tune lock: refusing to write under"),
        ("XDG_STATE_HOME", "cannot store the tuned result: refusing to write under"),
    ],
)
def test_tune_refuses_another_users_link(
    victim: Path, tmp_path: Path, variable: str, said: str
) -> None:
    """Before: root's tune created .tune.lock, then stored its result, in the link's target."""
    shared = _shared(victim.parent, "sticky", victim)
    environ = isolated_environ(tmp_path, **{variable: str(shared)})
    if variable == "XDG_STATE_HOME":
        del environ["HWTUNE_TUNED_DIR"]
    result = run_cli(["tune", "--budget", "5", *QUICK], environ)
    assert result.exit_status == 1, result.stderr
    assert f"error: {said} {shared}/hwtune: {shared} (mode 1777)" in result.stderr
    assert THEIRS in result.stderr and "\nhint: " in result.stderr
    assert list(victim.iterdir()) == []


@needs_root
def test_forget_refuses_another_users_link(victim: Path, tmp_path: Path) -> None:
    """Before: root's `hwtune tune --forget` removed every .json in the link's target."""
    kept = victim / "tuned" / "fingerprint" / "theirs.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    shared = _shared(victim.parent, "sticky", victim)
    environ = isolated_environ(tmp_path, XDG_STATE_HOME=str(shared))
    del environ["HWTUNE_TUNED_DIR"]
    with pytest.raises(TuneError, match="cannot remove the tuned result: refusing") as refused:
        forget("fingerprint", environ=environ)
    assert THEIRS in refused.value.message
    assert kept.exists()
