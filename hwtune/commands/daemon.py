"""`hwtune daemon`: detect, plan and apply now, then keep the output current until stopped.

Exit status: 0 after SIGTERM, 130 after SIGINT (Ctrl-C), also when the machine could not be
planned for (that is reported in `STATUS=` and the log, and the daemon keeps trying); 1 when
`--root` is not a directory or `--interval` is not positive; 6 (LOCKED) when another daemon,
or any other process, holds `--output`'s `.daemon.lock` (at start, or after its lock file was
deleted: hwtune.daemon.instance), which systemd/hwtune.service does not restart; 2 on a bad
command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.numbers import out_of_range, seconds_in
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import HwtuneError
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hwtune.apply.nfd import DEFAULT_DIR
    from hwtune.daemon import DEFAULT_INTERVAL_S

    parser.add_argument(
        "--root",
        type=nonempty_path,
        metavar="DIR",
        default="/",
        help="watch a tree laid out like / (a `hwtune snapshot`) instead of this machine",
    )
    parser.add_argument(
        "--output",
        type=nonempty_path,
        metavar="DIR",
        default=None,
        help="where to write the profile (default: /etc/hwtune as root, else "
        "$XDG_CONFIG_HOME/hwtune)",
    )
    parser.add_argument(
        "--interval",
        metavar="SECONDS",
        type=seconds_in(MIN_INTERVAL_S, MAX_INTERVAL_S),
        default=DEFAULT_INTERVAL_S,
        help="how often to re-read what inotify cannot see (sysfs, cgroups); "
        f"default {DEFAULT_INTERVAL_S:g}",
    )
    parser.add_argument(
        "--nfd",
        action="store_true",
        help="also keep a Node Feature Discovery feature file current",
    )
    parser.add_argument(
        "--nfd-dir",
        type=nonempty_path,
        metavar="DIR",
        default=None,
        help=f"NFD's features.d directory (default {DEFAULT_DIR}); implies --nfd",
    )
    parser.add_argument(
        "--poll-only",
        action="store_true",
        help="do not use inotify; notice every change by polling",
    )


# The shortest poll interval: a pass re-reads sysfs, cgroups and the config (milliseconds of
# CPU), so ten passes a second stay a small share of one CPU, and inotify already reports file
# changes at once. Below it the loop only spins: --interval 1e-300 kept a core 98% busy.
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 86400.0  # a day: run_daemon's own bound


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.daemon import run_daemon
    from hwtune.daemon.instance import AlreadyRunning
    from hwtune.paths import default_output_dir

    root = Path(args.root)
    if not root.is_dir():
        raise HwtuneError(
            f"--root {args.root}: not a directory",
            hint="give / or a directory made by `hwtune snapshot DIR`",
        )
    wrong = out_of_range("--interval", args.interval, MIN_INTERVAL_S, MAX_INTERVAL_S)
    if wrong is not None:
        raise HwtuneError(
            wrong,
            hint=f"each pass re-reads sysfs, cgroups and the config; more often than every "
            f"{MIN_INTERVAL_S:g} s only burns CPU (--interval 1e-300 kept a core 98% busy)",
        )
    output = Path(args.output) if args.output is not None else default_output_dir(env.environ)
    try:
        return run_daemon(
            root,
            output,
            args.interval,
            _nfd_dir(args),
            environ=env.environ,
            log=env.stderr,
            use_inotify=not args.poll_only,
        )
    except AlreadyRunning as err:  # at start; a restart would find the lock held again
        env.say("daemon", "error", err.message, err.hint)
        return ExitStatus.LOCKED


def _nfd_dir(args: argparse.Namespace) -> Path | None:
    """Where the NFD file goes, None for no NFD file: `--nfd-dir` alone asks for one too (it
    was ignored without `--nfd`, which left a unit that named a directory silently without
    labels)."""
    from hwtune.apply.nfd import DEFAULT_DIR

    if args.nfd_dir is not None:
        return Path(args.nfd_dir)
    return Path(DEFAULT_DIR) if args.nfd else None
