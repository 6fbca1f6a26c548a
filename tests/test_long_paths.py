"""A path the kernel refuses by its length, given on the command line.

A name past NAME_MAX (255 bytes) or a path past PATH_MAX (4096) makes pathlib's exists() and
is_dir() raise ENAMETOOLONG instead of answering False, so `--output`, `--root` and the like
ended in a Python traceback where the path was first looked at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

COMMANDS = [
    ["apply", "--output"],
    ["revert", "--output"],
    ["detect", "--root"],
    ["plan", "--root"],
    ["env", "--root"],
    ["explain", "jit", "--root"],
    ["nfd", "--root"],
    ["tune", "--forget", "--root"],
]


@pytest.mark.parametrize("shape", ["long name", "long path"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_path_too_long_is_an_error_naming_it(
    command: list[str], shape: str, tmp_path: Path
) -> None:
    path = tmp_path / ("a" * 300) if shape == "long name" else tmp_path / "/".join(["d"] * 3000)
    done = run_cli([*command, str(path)])
    assert done.exit_status == 1, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"hwtune {command[0]}: error: {str(path)[:100]}")
    assert first.endswith(f"({len(str(path))} characters): File name too long")
    assert len(first) < 400  # the path is cut, not printed whole
    assert not list(tmp_path.iterdir())  # nothing was created


def test_debug_still_shows_the_traceback(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="File name too long"):
        run_cli(["--debug", "detect", "--root", str(tmp_path / ("a" * 300))])
