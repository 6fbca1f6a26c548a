"""`hwtune explain SETTING`: why a setting has its value, or why it was left out.

Takes the same planning flags as `hwtune plan` (--root, --mode, --instances, --set…), so the
answer is about the same profile. Exit status: 0; 1 for a name the profile does not have (with
a did-you-mean hint) or a planning error; 2 on a bad command line.
"""

from __future__ import annotations

import argparse

from hwtune.cli import Environment
from hwtune.commands.plan import add_strict_argument, planned_for_people
from hwtune.commands.planning import add_plan_arguments
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "setting",
        metavar="SETTING",
        nargs="?",  # a bazel option looks like a flag: finish_args takes it from the leftovers
        help="an environment variable (KMP_AFFINITY), a profile field (threads.intra_op, "
        "jit.level, precision, tf_data.prefetch) or a bazel option, as one word "
        "(--copt=-march=znver4; or after --: hwtune explain --root DIR -- --copt=...)",
    )
    add_plan_arguments(parser)
    add_strict_argument(parser)


def finish_args(args: argparse.Namespace, extra: list[str]) -> str | None:
    """Take a bazel option argparse left over as SETTING (`explain --copt=-mcpu=power9`);
    the usage error otherwise, or None."""
    if args.setting is None and len(extra) == 1 and extra[0].startswith("--") and "=" in extra[0]:
        args.setting = extra[0]
        return None
    if extra:
        return (
            f"unrecognized arguments: {' '.join(extra)} (a bazel option is one word, "
            "--copt=-march=NAME, or goes after --)"
        )
    if args.setting is None:
        return (
            "the following arguments are required: SETTING (a bazel option is one word, "
            "--copt=-march=NAME, or goes after --)"
        )
    return None


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.planner import explain
    from hwtune.probes.issues import printable

    hardware, profile = planned_for_people("explain", args, env)
    # Reasons quote what the machine said (a snapshot's CUDA_DEVICE_ORDER, a GPU name): escape
    # control characters per line as `plan` does per cell, or an ESC in one rewrites the
    # terminal. The newlines explain itself writes stay.
    text = explain(profile, args.setting)
    env.stdout.write("\n".join(printable(line) for line in text.split("\n")) + "\n")
    if args.strict and hardware.issues:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS
