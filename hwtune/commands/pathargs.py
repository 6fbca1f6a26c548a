"""The argparse type of every option and argument that names a file or directory.

An empty string is no path, but the commands used to test a path by its truth value
(`Path(args.output) if args.output else default`), so `--output ""` silently meant the
default: `hwtune apply --output ""` as root wrote /etc/hwtune and `revert --output ""` reverted
it; `Path("")` is ".", so `--root ""` read the current directory and `snapshot ""` wrote into
it. A path given explicitly is now never empty: argparse's usage line and exit 2, naming the
option, like every other bad value.
"""

from __future__ import annotations

import argparse


def nonempty_path(text: str) -> str:
    """A path as typed, refused when empty (an option left out still gets its default)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text
