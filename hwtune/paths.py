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
| configure() records (verify)  | $XDG_RUNTIME_DIR/hwtune, else $TMPDIR/hwtune-<uid>           |

Only `os` is imported: configure()'s warm path (hwtune.apply.cache, .fingerprint) uses this
module and must stay cheap, so paths are strings; `*_path` helpers wrap them in pathlib.Path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

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
    """$HOME when set and absolute, else the password database's home (os.path.expanduser)."""
    value = _env(environ).get("HOME", "")
    if value and os.path.isabs(value):
        return value
    found = os.path.expanduser("~")
    return found if os.path.isabs(found) else "/"


def xdg_home(variable: str, environ: Mapping[str, str] | None = None) -> str:
    """$XDG_CONFIG_HOME / $XDG_CACHE_HOME / $XDG_STATE_HOME, a relative value ignored."""
    value = _env(environ).get(variable, "")
    if value and os.path.isabs(value):
        return value
    return os.path.join(home(environ), _XDG_DEFAULTS[variable])


def config_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(xdg_home("XDG_CONFIG_HOME", environ), "hwtune")


def config_files(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The config files, lowest precedence first: system, then the user's."""
    return (SYSTEM_CONFIG, os.path.join(config_dir(environ), "config.toml"))


def knowledge_dirs(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where user-added knowledge is looked for, lowest precedence first."""
    env = _env(environ)
    dirs = [os.path.join(config_dir(env), "knowledge")]
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
    (cron, containers, `su`) a per-user directory under $TMPDIR (else /tmp) named by the uid,
    which hwtune.apply.record creates 0700 and checks is the user's own before trusting it.
    """
    env = _env(environ)
    value = env.get("XDG_RUNTIME_DIR", "")
    if value and os.path.isabs(value):
        return os.path.join(value, "hwtune")
    tmp = env.get("TMPDIR", "")
    base = tmp if tmp and os.path.isabs(tmp) else "/tmp"
    return os.path.join(base, f"hwtune-{os.getuid() if uid is None else uid}")


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
