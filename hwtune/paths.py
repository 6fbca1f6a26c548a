"""Where hwtune writes by default: `/etc/hwtune` for root, else the XDG config directory."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SYSTEM_OUTPUT_DIR = Path("/etc/hwtune")


def _xdg(environ: Mapping[str, str], variable: str, fallback: str) -> Path:
    # XDG Base Directory spec: a relative value is invalid and must be ignored.
    value = environ.get(variable, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / fallback


def default_output_dir(
    environ: Mapping[str, str] | None = None, *, euid: int | None = None
) -> Path:
    """`/etc/hwtune` when running as root, else `$XDG_CONFIG_HOME/hwtune` (~/.config/hwtune)."""
    env = os.environ if environ is None else environ
    if (os.geteuid() if euid is None else euid) == 0:
        return SYSTEM_OUTPUT_DIR
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / "hwtune"


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/hwtune` (~/.cache/hwtune): the configure() profile cache."""
    env = os.environ if environ is None else environ
    return _xdg(env, "XDG_CACHE_HOME", ".cache") / "hwtune"
