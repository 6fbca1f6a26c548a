"""`hwtune apply`: detect, plan and write every output file.

Writes to /etc/hwtune as root, else $XDG_CONFIG_HOME/hwtune (`--output DIR` to choose):
hwtune.env (systemd EnvironmentFile=), hwtune.sh (sh), hwtune.dotenv (docker --env-file),
hwtune.json, tf_config.pbtxt (ConfigProto text format), tf_data_options.json,
tensorflow.bazelrc (when a source build is planned), profile.json and hardware.json. Each file
is replaced atomically, mode 0644, only when its content changes; concurrent applies are
serialised by a lock; the previous versions are journalled for `hwtune revert`.

Exit status: 0 written (or nothing to change); 4 (WOULD_CHANGE) with --dry-run or --diff when
files would change; 1 on a failure (nothing changed: a failed write rolls back the others);
6 (LOCKED) when another apply held the lock past --lock-timeout; 3 (ISSUES) with --strict when
a probe failed or was partial (nothing is written; without --strict a warning says so on
stderr, as `hwtune plan` does); 2 bad usage.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.numbers import seconds
from hwtune.commands.pathargs import nonempty_path
from hwtune.commands.plan import add_strict_argument
from hwtune.commands.planning import add_plan_arguments, request_from_args, warn_issues
from hwtune.errors import LockTimeout
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        type=nonempty_path,
        metavar="DIR",
        default=None,
        help="where to write (default: /etc/hwtune as root, else $XDG_CONFIG_HOME/hwtune)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing; list what would change "
        f"(exit {int(ExitStatus.WOULD_CHANGE)} if anything would)",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="write nothing; print a unified diff of what would change",
    )
    parser.add_argument(
        "--lock-timeout",
        type=seconds,
        default=30.0,
        metavar="S",
        help="seconds to wait for another apply (default 30)",
    )
    add_plan_arguments(parser)
    add_strict_argument(parser, "and write nothing")


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply.outputs import apply_all, edit_notes
    from hwtune.paths import default_output_dir
    from hwtune.pipeline.request import profile_for

    output = Path(args.output) if args.output is not None else default_output_dir(env.environ)
    if output.exists() and not output.is_dir():
        env.say(
            "apply",
            "error",
            f"--output {output}: not a directory (apply writes its files into a directory)",
        )
        return ExitStatus.USAGE
    planned = profile_for(request_from_args(args, env.environ))
    if warn_issues("apply", planned.hardware, args, env) and args.strict:
        env.say("apply", "note", "--strict: nothing written")
        return ExitStatus.ISSUES
    preview = args.dry_run or args.diff
    try:
        report = apply_all(
            output,
            planned.profile,
            planned.hardware,
            dry_run=preview,
            lock_timeout=args.lock_timeout,
        )
    except LockTimeout as err:
        env.say("apply", "error", err.message, err.hint)
        return ExitStatus.LOCKED
    for note in planned.notes:
        env.stdout.write(f"note: {note}\n")
    for recovered in report.recovered:
        env.stdout.write(f"rolled back an interrupted apply ({recovered}) first\n")
    if args.diff:
        env.stdout.write(report.diff)
    for path in report.changed:
        verb = report.verb(path)
        env.stdout.write(f"{'would be ' + verb if preview else verb}: {path}\n")
    if not report.changed:
        env.stdout.write(f"up to date: {output}\n")
    elif not preview:
        env.stdout.write(
            # Quoted as revert's own hint is: a directory with a space (or a `;`) made a
            # command that reverted another directory, or ran something else, when pasted.
            f"journal: {report.journal_id} (undo with "
            f"`hwtune revert --output {shlex.quote(str(output))}`)\n"
        )
    for line in edit_notes(report):  # a hand edit replaced is never said by "updated" alone
        env.say("apply", "note", line)
    if preview and report.changed:
        return ExitStatus.WOULD_CHANGE
    return ExitStatus.SUCCESS
