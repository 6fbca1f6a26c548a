"""hwtune.paths: XDG resolution in one place, used by config, cache, fingerprint, store, daemon."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hwtune import paths
from tests.apply_profiles import PYTHON
from tests.conftest import REPO


def test_relative_xdg_values_are_ignored_everywhere() -> None:
    environ = {
        "HOME": "/home/u",
        "XDG_CONFIG_HOME": "rel/config",
        "XDG_CACHE_HOME": "rel/cache",
        "XDG_STATE_HOME": "rel/state",
        "XDG_RUNTIME_DIR": "rel/run",
        "TMPDIR": "rel/tmp",
    }
    assert paths.config_files(environ)[1] == "/home/u/.config/hwtune/config.toml"
    assert paths.cache_dir(environ) == "/home/u/.cache/hwtune"
    assert paths.tuned_dir(environ) == "/home/u/.local/state/hwtune/tuned"
    assert paths.knowledge_dirs(environ) == ("/home/u/.config/hwtune/knowledge",)
    assert paths.runtime_dir(environ, uid=1234) == "/tmp/hwtune-1234"
    assert str(paths.default_output_dir(environ, euid=1000)) == "/home/u/.config/hwtune"


def test_absolute_xdg_values_are_used(tmp_path: Path) -> None:
    environ = {
        "HOME": "/home/u",
        "XDG_CONFIG_HOME": "/c",
        "XDG_CACHE_HOME": "/k",
        "XDG_STATE_HOME": "/s",
        "XDG_RUNTIME_DIR": str(tmp_path),  # used only when it exists (it is never created)
        "HWTUNE_KNOWLEDGE_DIR": "/kn",
    }
    assert paths.config_files(environ) == ("/etc/hwtune/config.toml", "/c/hwtune/config.toml")
    assert paths.cache_dir(environ) == "/k/hwtune"
    assert paths.tuned_dir(environ) == "/s/hwtune/tuned"
    assert paths.tuned_dir({**environ, "HWTUNE_TUNED_DIR": "/t"}) == "/t"
    assert paths.knowledge_dirs(environ) == ("/c/hwtune/knowledge", "/kn")
    assert paths.runtime_dir(environ) == f"{tmp_path}/hwtune"
    assert str(paths.default_output_dir(environ, euid=0)) == "/etc/hwtune"


@pytest.mark.parametrize("xdg", ["rel/config", "/abs"])
def test_every_reader_asks_paths(xdg: str, tmp_path: Path) -> None:
    """The config loader, the cache fingerprint, the daemon, the knowledge loader and the
    tuned-result store name the same files for the same environment."""
    from hwtune.apply.fingerprint import config_paths as fingerprinted
    from hwtune.daemon.inputs import config_paths as watched
    from hwtune.daemon.inputs import tuned_directory
    from hwtune.knowledge import user_dirs
    from hwtune.pipeline.config import config_paths as loaded
    from hwtune.pipeline.measured import tuned_dir

    environ = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": xdg, "XDG_STATE_HOME": "rel"}
    expected = list(paths.config_files(environ))
    assert fingerprinted(environ) == expected
    assert [str(p) for p in loaded(environ)] == expected
    assert [str(p) for p in watched(environ)] == expected
    assert [str(p) for p in user_dirs(environ)] == list(paths.knowledge_dirs(environ))
    assert str(tuned_dir(environ)) == str(tuned_directory(environ)) == paths.tuned_dir(environ)


def test_a_config_edit_reaches_the_cached_profile_with_a_relative_xdg_config_home(
    tmp_path: Path,
) -> None:
    """With XDG_CONFIG_HOME relative, `config` reads ~/.config/hwtune/config.toml (the spec
    ignores the relative value); the cache fingerprint must watch that same file, or an edit
    is served stale from the configure() cache."""
    home = tmp_path / "home"
    config = home / ".config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "XDG_", "TF_"))}
    environ.update(HOME=str(home), XDG_CONFIG_HOME="relative-config")

    def inter_op() -> str:
        out = subprocess.run(
            [PYTHON, "-m", "hwtune", "env", "--format", "json"],
            capture_output=True,
            text=True,
            env=environ,
            cwd=tmp_path,
            timeout=120,
            check=True,
        ).stdout
        return str(json.loads(out)["TF_NUM_INTEROP_THREADS"])

    config.write_text("[threads]\ninter_op = 1\n")
    assert inter_op() == "1"
    config.write_text("[threads]\ninter_op = 3\n")
    assert inter_op() == "3"


def _paths_in_child(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    """hwtune.paths in a child with only `environ` (no XDG_*, HOME as given)."""
    probe = (
        "import json; from hwtune import paths; "
        "print(json.dumps([paths.cache_dir(), paths.config_files()[1], paths.tuned_dir()]))"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **environ}
    return subprocess.run(
        [PYTHON, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )


@pytest.mark.parametrize("home", ["", "relative/home"])
def test_an_empty_or_relative_home_falls_back_to_the_password_database(
    home: str, tmp_path: Path
) -> None:
    """Before: os.path.expanduser("~") returned the empty $HOME as "/" (and a relative one as
    it was, then "/"), so the cache went to /.cache/hwtune at the root of the file system."""
    import pwd

    own = pwd.getpwuid(os.getuid()).pw_dir
    done = _paths_in_child(tmp_path, HOME=home)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        f"{own}/.cache/hwtune",
        f"{own}/.config/hwtune/config.toml",
        f"{own}/.local/state/hwtune/tuned",
    ]


def test_no_home_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A uid with no /etc/passwd line (a container's `--user 12345`) and no usable HOME: a
    ConfigError that says what to set, not files under /. (The password database is the one
    part replaced here: a test cannot run the interpreter as a uid without an entry.)"""
    import pwd

    from hwtune.errors import ConfigError

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for environ in ({}, {"HOME": ""}, {"HOME": "rel"}):
        with pytest.raises(ConfigError, match="no home directory") as caught:
            paths.cache_dir(environ)
        assert "XDG_CACHE_HOME" in str(caught.value)
    # An absolute XDG variable needs no home.
    assert paths.cache_dir({"XDG_CACHE_HOME": "/k"}) == "/k/hwtune"


def test_a_missing_tmpdir_is_not_created(tmp_path: Path) -> None:
    """configure() without XDG_RUNTIME_DIR records under the temporary directory. Before, a
    $TMPDIR that did not exist was created, every level 0700; now the search goes on as
    tempfile.gettempdir()'s does ($TEMP here), and a missing $XDG_RUNTIME_DIR is skipped too."""
    missing, temp = tmp_path / "no-such-tmp", tmp_path / "temp"
    temp.mkdir()
    probe = (
        "import hwtune, os; hwtune.configure(tensorflow=False); "
        f"print(sorted(os.listdir({str(temp)!r} + f'/hwtune-{{os.getuid()}}')))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_", "XDG_"))}
    env.update(
        TMPDIR=str(missing),
        TEMP=str(temp),
        XDG_RUNTIME_DIR=str(tmp_path / "no-such-run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    done = subprocess.run(
        [PYTHON, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("['configure-") and done.stdout.count("configure-") == 1
    assert not missing.exists() and not (tmp_path / "no-such-run").exists()
