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


def test_no_home_anywhere_only_costs_the_per_user_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """A uid with no /etc/passwd line (a container's `--user 12345`) and no usable HOME:
    readers take the per-user files as absent (the user's config file and knowledge directory
    are left out, `or_none` gives None); only a default that must be written under the home
    (the cache, the tune store, a non-root user's output directory) is a ConfigError naming
    what to set, not files under /. Before, reading raised too, and `hwtune plan`, `env`,
    `exec` and configure() stopped at it. (The password database is the one part replaced
    here; the children below run the real commands.)"""
    import pwd

    from hwtune.errors import ConfigError, NoHomeError

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for environ in ({}, {"HOME": ""}, {"HOME": "rel"}):
        with pytest.raises(ConfigError, match="no home directory") as caught:
            paths.cache_dir(environ)
        assert "XDG_CACHE_HOME" in str(caught.value)
        with pytest.raises(NoHomeError):
            paths.tuned_dir(environ)
        with pytest.raises(NoHomeError):
            paths.default_output_dir(environ, euid=1000)
        assert str(paths.default_output_dir(environ, euid=0)) == "/etc/hwtune"
        assert paths.config_files(environ) == ("/etc/hwtune/config.toml",)
        assert paths.knowledge_dirs({**environ, "HWTUNE_KNOWLEDGE_DIR": "/kn"}) == ("/kn",)
        assert paths.or_none(paths.cache_dir, environ) is None
        assert paths.home_problem(environ, (paths.config_dir,)) is not None
    # An absolute XDG variable needs no home.
    assert paths.cache_dir({"XDG_CACHE_HOME": "/k"}) == "/k/hwtune"
    assert paths.config_files({"XDG_CONFIG_HOME": "/c"})[1] == "/c/hwtune/config.toml"
    assert paths.home_problem({"XDG_CONFIG_HOME": "/c"}, (paths.config_dir,)) is None


# A child with no password database entry for its uid. Running it as such a uid for real
# (`setpriv --reuid=4242`) needs an interpreter and hwtune's dependencies that uid can read,
# which a virtual environment under /root is not; so the child runs as this user, with a
# sitecustomize (imported by every interpreter start, before hwtune) making getpwuid(3) fail
# as it does for a uid without an /etc/passwd line. All else (the commands, the environment
# without HOME or XDG_*, as `env -i` or `docker run -u 12345` gives) is real.
_NO_PASSWD_ENTRY = """\
import pwd


def _no_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")


pwd.getpwuid = _no_entry
"""


def _homeless(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_NO_PASSWD_ENTRY)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{site}{os.pathsep}{REPO}",
        "TMPDIR": str(tmp_path),
    }
    return subprocess.run(
        [PYTHON, *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )


@pytest.mark.parametrize(
    "command",
    [["exec", "--", "true"], ["plan"], ["env"], ["plan", "--workload", "w", "--json"]],
    ids=["exec", "plan", "env", "plan-workload"],
)
def test_commands_work_without_any_home(command: list[str], tmp_path: Path) -> None:
    """Before: exit 1, "no home directory for hwtune's files". Now the plan is made from the
    rules, with one note saying no per-user file was read."""
    done = _homeless(tmp_path, "-m", "hwtune", *command)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert said.count("no home directory") == 1, said
    assert "error" not in done.stderr
    if "no home directory" in done.stderr:  # env says it in its header, on stdout
        # exec said "hwtune exec: no home directory…" where plan says "hwtune plan: note: …"
        assert f"hwtune {command[0]}: note: no home directory" in done.stderr, done.stderr
    assert not (tmp_path / ".cache").exists()


def test_configure_applies_without_any_home(tmp_path: Path) -> None:
    """Before: a RuntimeWarning "could not plan a profile (ConfigError: no home directory…);
    nothing was changed". Now the rules are applied and nothing is cached."""
    probe = (
        "import os, warnings; warnings.simplefilter('error'); import hwtune; "
        "r = hwtune.configure(tensorflow=False); "
        "print(r.cached, repr(r.cache_path), os.environ['TF_NUM_INTEROP_THREADS'])"
    )
    done = _homeless(tmp_path, "-c", probe)
    assert done.returncode == 0, done.stderr
    cached, cache_path, inter_op = done.stdout.split()
    assert (cached, cache_path) == ("False", "''")
    assert int(inter_op) >= 1


def test_storing_a_tune_result_without_any_home_is_a_clear_error(tmp_path: Path) -> None:
    """Writing is where a home is needed: `hwtune tune` refuses before measuring, naming
    what to set."""
    done = _homeless(
        tmp_path, "-m", "hwtune", "tune", "--workload", "builtin:cnn", "--budget", "1"
    )
    assert done.returncode != 0
    assert "no home directory" in done.stderr
    assert "XDG_STATE_HOME" in done.stderr


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
