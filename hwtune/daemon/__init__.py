"""`hwtune daemon`: keep the applied profile current as the machine changes, under systemd.

    run_daemon(root="/", output="/etc/hwtune", interval=30.0, nfd_dir=None)

runs until SIGTERM (exit 0) or SIGINT (exit 130), re-reads everything on SIGHUP, and checks its
inputs at once on SIGUSR1 or SIGUSR2 (what logrotate-style scripts send; it logs to stderr and
has no log file to reopen, and must not die of their default action). It talks to
systemd with sd_notify (`sdnotify.py`), notices changes with inotify plus polling (`watch.py`,
`inputs.py`), and logs one line per change (`changes.py`). See docs/daemon.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

# 30 s: half of NFD's default rescan (core.sleepInterval 60 s), so a change reaches node labels
# within one NFD cycle; a poll reads ~30 small files (~1 ms of CPU), so idle cost is ~0.003% of
# a core (bench/bench_daemon.py). Config edits, TensorFlow installs and /dev/nvidia* changes
# wake it at once through inotify; only sysfs/cgroupfs changes wait for the poll.
DEFAULT_INTERVAL_S = 30.0


def run_daemon(
    root: str | os.PathLike[str] = "/",
    output: str | os.PathLike[str] = "/etc/hwtune",
    interval: float = DEFAULT_INTERVAL_S,
    nfd_dir: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    log: TextIO | None = None,
    use_inotify: bool = True,
) -> int:
    """Run the daemon in this process until SIGTERM (returns 0) or SIGINT (returns 130), or
    until another daemon takes its output directory over (returns 6, ExitStatus.LOCKED;
    instance module doc). AlreadyRunning at once when another process holds the directory's
    `.daemon.lock` at start (the CLI exits 6 for it too).

    Must run in the main thread (it installs signal handlers).
    """
    from hwtune.daemon.loop import Daemon, DaemonOptions

    if not 0 < interval <= 86400:
        raise ValueError(f"interval must be more than 0 and at most 86400 seconds, got {interval}")
    options = DaemonOptions(
        root=Path(root),
        output=Path(output),
        interval=float(interval),
        nfd_dir=Path(nfd_dir) if nfd_dir is not None else None,
        use_inotify=use_inotify,
    )
    daemon = Daemon(options, os.environ if environ is None else environ, log or sys.stderr)
    return daemon.run()


__all__ = ["DEFAULT_INTERVAL_S", "run_daemon"]
