"""`hwtune snapshot DIR`: copy what detect reads on this machine into DIR (same layout).

`hwtune detect --root DIR` then reproduces this machine's answers elsewhere. DIR must be new or
empty. Exit status: 0 when every required file was copied (issues such as "nvidia-smi not
found" are printed and kept in MANIFEST.json, but a machine without GPUs is not an error);
3 (`ExitStatus.ISSUES`) when a required file was missing (the snapshot is still written);
1 when DIR cannot be used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hwtune.cli import Environment
from hwtune.commands.pathargs import nonempty_path
from hwtune.errors import HwtuneError
from hwtune.models.words import plural
from hwtune.status import ExitStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", type=nonempty_path, metavar="DIR", help="a new or empty directory to write into"
    )
    parser.add_argument("--no-gpu", action="store_true", help="skip the nvidia-smi captures")
    parser.add_argument(
        "--no-tensorflow", action="store_true", help="skip the TensorFlow install facts"
    )


def run(args: argparse.Namespace, env: Environment) -> int:
    from hwtune.probes.snapshot import MANIFEST, take_snapshot

    dest = Path(args.dir)
    try:
        manifest = take_snapshot(dest, gpus=not args.no_gpu, tensorflow=not args.no_tensorflow)
    except HwtuneError:  # a refusal that already says what to do (ApplyError is an OSError)
        raise
    except OSError as err:  # a write failed part-way (full disk, read-only): no traceback
        where = f" ({err.filename})" if err.filename else ""
        raise HwtuneError(
            f"cannot write the snapshot in {dest}: {err.strerror or err}{where}",
            hint="give a directory on a writable file system with room; the snapshot there "
            "is incomplete (no MANIFEST.json)",
        ) from err
    print(f"hwtune snapshot: {plural(len(manifest['files']), 'file')} in {dest}", file=env.stdout)
    for entry in manifest["missing"]:
        print(f"  missing {entry['path']}: {entry['reason']}", file=env.stdout)
    for name, state in manifest["captures"].items():
        print(f"  {name}: {state}", file=env.stdout)
    for issue in manifest["issues"]:
        print(f"  issue: {issue['probe']}: {issue['reason']}", file=env.stdout)
    print(
        f"  see {dest / MANIFEST}; read it back with: hwtune detect --root {dest}", file=env.stdout
    )
    if manifest["missing"]:
        return ExitStatus.ISSUES
    return ExitStatus.SUCCESS
