"""`hwtune detect`: probe this machine (or a snapshot tree) and print what was found.

Exit status: 0 on success; 3 (`ExitStatus.ISSUES`) with `--strict` when any probe failed or
was partial; 1 when `--root` is not a directory; 2 on a bad command line.
Kept to stdlib + hwtune imports: `hwtune detect --json` must start, probe and print within its
150 ms budget (bench/bench_detect.py), so pydantic, psutil, py-cpuinfo and TensorFlow stay out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import HwtuneError
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
    if args.json:
        from hwtune.models.convert import dumps_json

        env.stdout.write(dumps_json(hw, "detect --json", indent=2) + "\n")
    else:
        from hwtune.probes.report import render_summary

        env.stdout.write(render_summary(hw))
    if args.strict and hw.issues:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS
