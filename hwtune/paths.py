"""Every place hwtune reads or writes by default, with XDG resolution done once, here.

The XDG Base Directory Specification
(https://specifications.freedesktop.org/basedir-spec/latest/) gives each kind of file a
variable and a default under $HOME; "if ... set to a relative path", the value "is invalid and
should be ignored", so a relative value falls back to the default as if unset. Config, the
profile cache, its fingerprint, the daemon, the knowledge loader and the tuned-result store all
ask this module, so they cannot disagree about a file (a relative XDG_CONFIG_HOME once made
`config` read one config.toml while the cache fingerprint watched another).

| what                          | where                                                        |
|-------------------------------|--------------------------------------------------------------|
| config files                  | /etc/hwtune/config.toml, $XDG_CONFIG_HOME/hwtune/config.toml |
| knowledge overrides           | $XDG_CONFIG_HOME/hwtune/knowledge/, $HWTUNE_KNOWLEDGE_DIR    |
| apply/daemon output           | /etc/hwtune as root, else $XDG_CONFIG_HOME/hwtune            |
| configure() profile cache     | $XDG_CACHE_HOME/hwtune                                       |
| tune results                  | $HWTUNE_TUNED_DIR, else $XDG_STATE_HOME/hwtune/tuned         |
| configure() records (verify)  | $XDG_RUNTIME_DIR/hwtune, else <temporary dir>/hwtune-<uid>   |

$HOME is used when it is absolute; an empty or relative one (a unit with `Environment=HOME=`,
`env HOME= …`) falls back to the user's home in the password database, as the XDG defaults are
"$HOME/.cache" and so on and a relative base is as meaningless for $HOME as for XDG_*. Without
either (`docker run -u 12345` without HOME, `env -i`), the per-user files are only what is
missing: readers (config files, knowledge overrides, the configure() cache and its
fingerprint, stored tune results) take it as "no such file" (`config_files`,
`knowledge_dirs`, `or_none`), and only writing one (tune storing a result, apply/daemon's
default output directory for a non-root user) is a NoHomeError (a ConfigError) naming what to
set; before, the files went to `/.cache/hwtune`, `/.config/hwtune` at the root of the file
system.

Only `os` is imported: configure()'s warm path (hwtune.apply.cache, .fingerprint) uses this
module and must stay cheap, so paths are strings; `*_path` helpers wrap them in pathlib.Path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from hwtune.errors import NoHomeError

SYSTEM_DIR = "/etc/hwtune"
SYSTEM_CONFIG = os.path.join(SYSTEM_DIR, "config.toml")
# XDG defaults relative to $HOME (basedir-spec "Environment variables").
_XDG_DEFAULTS = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_CACHE_HOME": ".cache",
    "XDG_STATE_HOME": os.path.join(".local", "state"),
}


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def home(environ: Mapping[str, str] | None = None) -> str:
    """$HOME when set and absolute, else the password database's home of this user.

    Not os.path.expanduser("~"): it returns an empty or relative $HOME of os.environ as it is
    ("" becomes "/"), and reads os.environ, not the environment asked about.
    """
    value = _env(environ).get("HOME", "")
    if value and os.path.isabs(value):
        return value
    found = _password_home()
    if found is None:
        from hwtune.errors import NoHomeError

        shown = "unset" if "HOME" not in _env(environ) else f"{value!r}, not an absolute path"
        raise NoHomeError(
            f"no home directory for hwtune's files: HOME is {shown}, and the password "
            f"database has no absolute home for uid {os.getuid()}",
            hint="set HOME to an absolute path, or XDG_CONFIG_HOME, XDG_CACHE_HOME and "
            "XDG_STATE_HOME to absolute paths",
        )
    return found


def or_none(
    lookup: Callable[[Mapping[str, str] | None], str], environ: Mapping[str, str] | None = None
) -> str | None:
    """lookup(environ) (`cache_dir`, `tuned_dir`…), or None when there is no home to put it
    under: for a reader, no file there."""
    from hwtune.errors import NoHomeError

    try:
        return lookup(environ)
    except NoHomeError:
        return None


def home_problem(
    environ: Mapping[str, str] | None = None,
    lookups: tuple[Callable[[Mapping[str, str] | None], str], ...] = (),
) -> NoHomeError | None:
    """The NoHomeError the first of `lookups` (the config directory, the tuned store) raises,
    for the one note saying which per-user files are not read; None when all resolve."""
    from hwtune.errors import NoHomeError as Missing

    for lookup in lookups or (config_dir, tuned_dir):
        try:
            lookup(environ)
        except Missing as err:
            return err
    return None


def _password_home() -> str | None:
    """pw_dir of this uid (getpwuid(3)); None when the database has no usable entry (a uid a
    container runs as without an /etc/passwd line)."""
    import pwd  # built into the interpreter: no file is loaded

    try:
        found = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
    return found if found and os.path.isabs(found) else None


def xdg_home(variable: str, environ: Mapping[str, str] | None = None) -> str:
    """$XDG_CONFIG_HOME / $XDG_CACHE_HOME / $XDG_STATE_HOME, a relative value ignored."""
    value = _env(environ).get(variable, "")
    if value and os.path.isabs(value):
        return value
    return os.path.join(home(environ), _XDG_DEFAULTS[variable])


def config_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(xdg_home("XDG_CONFIG_HOME", environ), "hwtune")


def config_files(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The config files, lowest precedence first: system, then the user's (none without a
    home to find it under)."""
    user = or_none(config_dir, environ)
    return (SYSTEM_CONFIG,) if user is None else (SYSTEM_CONFIG, os.path.join(user, "config.toml"))


def knowledge_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where user-added knowledge is looked for, lowest precedence first (the one under the
    config directory left out without a home to find it under)."""
    env = _env(environ)
    user = or_none(config_dir, env)
    dirs = [] if user is None else [os.path.join(user, "knowledge")]
    if env.get("HWTUNE_KNOWLEDGE_DIR"):
        dirs.append(env["HWTUNE_KNOWLEDGE_DIR"])
    return tuple(dirs)


def cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """The configure() profile cache."""
    return os.path.join(xdg_home("XDG_CACHE_HOME", environ), "hwtune")


def state_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(xdg_home("XDG_STATE_HOME", environ), "hwtune")


def tuned_dir(environ: Mapping[str, str] | None = None) -> str:
    """`hwtune tune`'s stored results: $HWTUNE_TUNED_DIR (tests, a shared directory), else
    $XDG_STATE_HOME/hwtune/tuned."""
    env = _env(environ)
    if env.get("HWTUNE_TUNED_DIR"):
        return env["HWTUNE_TUNED_DIR"]
    return os.path.join(state_dir(env), "tuned")


def runtime_dir(environ: Mapping[str, str] | None = None, *, uid: int | None = None) -> str:
    """Where configure() records what it set, for `hwtune verify` (hwtune.apply.record).

    $XDG_RUNTIME_DIR is per user, mode 0700 and cleared at logout (basedir-spec); without it
    (cron, containers, `su`), or when it is relative or no directory, a per-user directory
    named by the uid in the temporary directory (`temporary_dir`), which hwtune.apply.record
    creates 0700 and checks is the user's own before trusting it. Only that last level is
    hwtune's to create: a missing $XDG_RUNTIME_DIR or $TMPDIR is the user's mistake, not a
    directory hwtune should make.
    """
    env = _env(environ)
    value = env.get("XDG_RUNTIME_DIR", "")
    if value and os.path.isabs(value) and os.path.isdir(value):
        return os.path.join(value, "hwtune")
    return os.path.join(temporary_dir(env), f"hwtune-{os.getuid() if uid is None else uid}")


# tempfile.gettempdir()'s search (Python docs, tempfile "gettempdir"): $TMPDIR, $TEMP, $TMP,
# then these. Not tempfile itself: it reads os.environ, caches its answer for the process and
# costs configure()'s start-up an import of random and shutil.
_TEMPORARY_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def temporary_dir(environ: Mapping[str, str] | None = None) -> str:
    """The first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp that is an absolute path to
    a directory this user may write in; /tmp when none is (writing there then fails)."""
    env = _env(environ)
    named = [env.get(name, "") for name in ("TMPDIR", "TEMP", "TMP")]
    for candidate in (*named, *_TEMPORARY_DIRS):
        if (
            candidate
            and os.path.isabs(candidate)
            and os.path.isdir(candidate)
            and os.access(candidate, os.W_OK | os.X_OK)
        ):
            return candidate
    return "/tmp"


def default_output_dir(
    environ: Mapping[str, str] | None = None, *, euid: int | None = None
) -> Path:
    """`/etc/hwtune` when running as root, else `$XDG_CONFIG_HOME/hwtune` (~/.config/hwtune)."""
    from pathlib import Path

    if (os.geteuid() if euid is None else euid) == 0:
        return Path(SYSTEM_DIR)
    return Path(config_dir(environ))


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/hwtune` (~/.cache/hwtune): the configure() profile cache."""
    from pathlib import Path

    return Path(cache_dir(environ))
