"""`hwtune nfd`: write the Node Feature Discovery feature file once (`features.d/hwtune`).

Exit status: 0 when written (or printed with `--print`); 1 when the directory cannot be
written or `--root` is not a directory; 2 on a bad command line. For a file that follows the
machine as it changes, run `hwtune daemon --nfd` instead.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.numbers import out_of_range, seconds_in
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import ApplyError, HwtuneError
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hwtune.apply.nfd import DEFAULT_DIR

    parser.add_argument(
        "--output",
        type=nonempty_path,
        metavar="DIR",
        default=DEFAULT_DIR,
        help=f"NFD's features.d directory (default {DEFAULT_DIR})",
    )
    parser.add_argument(
        "--root",
        type=nonempty_path,
        metavar="DIR",
        default="/",
        help="describe a tree laid out like / (a `hwtune snapshot`)",
    )
    parser.add_argument(
        "--ttl",
        metavar="SECONDS",
        type=seconds_in(MIN_TTL_S, MAX_TTL_S, MAX_TTL_WORDS),
        default=None,
        help="add `# +expiry-time=` this far ahead, so NFD drops the labels if "
        "nothing rewrites the file (default: no expiry)",
    )
    parser.add_argument(
        "--print",
        action="store_true",
        dest="print_only",
        help="print the file instead of writing it",
    )


# The shortest expiry: one nfd-worker rescan at its default core.sleepInterval of 60 s (NFD
# docs, "nfd-worker configuration"); a file that expires sooner can lapse before it is read.
MIN_TTL_S = 60.0
MAX_TTL_S = 10 * 365 * 86400.0
MAX_TTL_WORDS = "10 years"


def _check_output(output: str) -> None:
    """A missing features.d directory, with what to do instead (the daemon says the same)."""
    from hwtune.apply.nfd import missing_directory

    missing = missing_directory(
        output, option="--output", instead="or print the file with --print (e.g. --print > FILE)"
    )
    if missing is not None:
        raise HwtuneError(missing.message, hint=missing.hint)


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.apply import nfd
    from hwtune.probes import detect

    root = Path(args.root)
    if not root.is_dir():
        raise HwtuneError(
            f"--root {args.root}: not a directory",
            hint="give / or a directory made by `hwtune snapshot DIR`",
        )
    wrong = (
        None
        if args.ttl is None
        else out_of_range("--ttl", args.ttl, MIN_TTL_S, MAX_TTL_S, MAX_TTL_WORDS)
    )
    if wrong is not None:
        raise HwtuneError(
            wrong,
            hint=f"nfd-worker reads features.d every {MIN_TTL_S:g} s by default "
            "(core.sleepInterval), so labels that expire sooner may never be published; "
            "for labels that follow the machine, run `hwtune daemon --nfd`",
        )
    hardware = detect(root)
    profile = None
    try:
        from hwtune.pipeline.request import PlanRequest, profile_for

        profile = profile_for(PlanRequest(env.environ, hardware=hardware)).profile
    except HwtuneError as err:  # labels from the hardware alone are still worth writing
        env.say("nfd", "note", f"no profile labels: {err.message}")
    now = datetime.now(timezone.utc)
    text = nfd.render(
        nfd.labels(hardware, profile),
        expiry=nfd.expiry_after(now, args.ttl) if args.ttl else None,
        generated=now,
    )
    if args.print_only:
        env.stdout.write(text)
        return ExitStatus.SUCCESS
    _check_output(args.output)
    try:
        path = nfd.write_feature_file(args.output, text)
    except ValueError as err:
        raise HwtuneError(str(err)) from err
    except ApplyError:  # names the file and the reason already
        raise
    except OSError as err:
        raise HwtuneError(
            f"cannot write to {args.output}: {err}", hint="create the directory, or run as root"
        ) from err
    print(f"wrote {path}", file=env.stdout)
    return ExitStatus.SUCCESS
