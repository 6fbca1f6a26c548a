"""`hwtune revert [--output DIR] [--force]`: restore the files the last apply replaced.

Each `hwtune apply` that changes something journals the previous versions
(`OUTPUT/.journal/`); revert puts them back exactly (bytes and mode), removes files that did
not exist before, and drops that journal entry, so repeated reverts walk further back.
An apply killed midway is rolled back by the next revert (or apply).
Exit status: 0 (also when there is nothing to revert); 1 on a failure or when a file was
edited since the apply wrote it (use --force); 2 bad usage (--output is not a directory);
6 when another apply holds the lock.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.numbers import seconds
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import LockTimeout
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        type=nonempty_path,
        metavar="DIR",
        default=None,
        help="the directory apply wrote to (default: /etc/hwtune as root, "
        "else $XDG_CONFIG_HOME/hwtune)",
    )
    parser.add_argument(
        "--force", action="store_true", help="restore even files that were edited after the apply"
    )
    parser.add_argument(
        "--lock-timeout",
        type=seconds,
        default=30.0,
        metavar="S",
        help="seconds to wait for an apply or revert in progress (default 30)",
    )


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply.outputs import revert
    from hwtune.paths import default_output_dir

    output = Path(args.output) if args.output is not None else default_output_dir(env.environ)
    if output.exists() and not output.is_dir():  # as apply says it: nothing was written there
        env.say(
            "revert",
            "error",
            f"--output {output}: not a directory (apply writes its files into a directory)",
        )
        return ExitStatus.USAGE
    try:
        entry_id, restored, recovered = revert(
            output, force=args.force, lock_timeout=args.lock_timeout
        )
    except LockTimeout as err:
        env.say("revert", "error", err.message, err.hint)
        return ExitStatus.LOCKED
    if recovered:
        env.stdout.write(
            f"rolled back an interrupted apply ({', '.join(recovered)}) in {output}\n"
        )
    elif entry_id is None:
        env.stdout.write(f"nothing to revert in {output}\n")
    else:
        env.stdout.write(f"reverted apply {entry_id} in {output}\n")
        for path in restored:
            action = "restored" if path.exists() else "removed (it did not exist before)"
            env.stdout.write(f"  {action} {path.name}\n")
    return ExitStatus.SUCCESS
