"""`hwtune detect`: probe this machine (or a snapshot tree) and print what was found.

Exit status: 0 on success; 3 (`ExitStatus.ISSUES`) with `--strict` when any probe failed or
was partial; 1 when `--root` is not a directory; 2 on a bad command line.
Kept to stdlib + hwtune imports: `hwtune detect --json` must start, probe and print within its
150 ms budget (bench/bench_detect.py), so pydantic, psutil, py-cpuinfo and TensorFlow stay out.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import HwtuneError, KnowledgeError
from hwtune.models.hardware import ProbeIssue
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--root",
        type=nonempty_path,
        metavar="DIR",
        default="/",
        help="read a tree laid out like / (a `hwtune snapshot`, or one with only proc/cpuinfo "
        "or lscpu.txt) instead of this machine",
    )
    parser.add_argument("--json", action="store_true", help="print the hardware model as JSON")
    parser.add_argument(
        "--strict",
        action="store_true",
        help=f"exit {int(ExitStatus.ISSUES)} if any probe failed or was partial",
    )
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU probe (NVML)")
    parser.add_argument(
        "--no-tensorflow", action="store_true", help="skip looking for an installed TensorFlow"
    )


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.probes import detect, live_environ

    root = Path(args.root)
    if not root.is_dir():
        raise HwtuneError(
            f"--root {args.root}: not a directory",
            hint="give / or a directory made by `hwtune snapshot DIR`",
        )
    hw = detect(
        root,
        gpus=not args.no_gpu,
        tensorflow=not args.no_tensorflow,
        environ=live_environ(root.absolute(), env.environ),
    )
    unusable = knowledge_issue(hw.issues)
    if unusable is not None:
        hw = replace(hw, issues=(*hw.issues, unusable))
    if args.json:
        from hwtune.models.convert import dumps_json

        env.stdout.write(dumps_json(hw, "detect --json", indent=2) + "\n")
    else:
        from hwtune.probes.report import render_summary

        env.stdout.write(render_summary(hw))
    if args.strict and hw.issues:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS


# The tables only planning reads (hwtune/planner/knowledge.py load_knowledge): detection never
# loads them, so a user's copy that `hwtune plan` refuses would otherwise pass detect unseen.
PLANNING_TABLES = ("tensorflow_versions", "compilers", "cuda_versions", "int8", "int8_routes")


def knowledge_issue(issues: tuple[ProbeIssue, ...]) -> ProbeIssue | None:
    """An issue when the user's knowledge is what `hwtune plan` refuses (README: a
    $HWTUNE_KNOWLEDGE_DIR that is no directory, or a planning table there that does not
    validate), unless a probe already reported it; None otherwise. Planning tables are read
    only where the user has one, so a plain detect keeps its start-up budget."""
    from hwtune.knowledge import user_dirs

    try:
        dirs = user_dirs()
        if any(os.path.lexists(d / f"{t}.json") for d in dirs for t in PLANNING_TABLES):
            from hwtune.planner.knowledge import load_knowledge

            load_knowledge(dirs)
    except KnowledgeError as err:
        if any(err.message in issue.reason for issue in issues):
            return None
        return ProbeIssue(
            probe="knowledge", reason=f"{err.message}; `hwtune plan` refuses it until fixed"
        )
    return None
