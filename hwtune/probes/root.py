"""The root a probe reads under: "/" for this machine, or a snapshot directory."""

from __future__ import annotations

import os
from pathlib import Path


def is_live(root: Path) -> bool:
    """True when `root` is this machine's real root, so live-only sources (NVML) apply."""
    try:
        return root.resolve() == Path("/").resolve() or os.path.samefile(root, "/")
    except OSError:
        return False
