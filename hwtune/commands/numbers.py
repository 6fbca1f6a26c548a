"""argparse types for the numbers flags take: ASCII only and finite.

Python's float() and int() take more than a person types: Unicode digits ("٣" is 3), "nan",
"inf", "1_000". A duration of NaN never compares true, so a `> 0` check passes it on to
time.sleep() or a deadline; an infinite one waits forever. Both are refused at the flag, with
argparse's usage line and exit 2, like every other bad value.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from hwtune.models.digits import parse_ascii_int

_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def seconds(text: str) -> float:
    """A duration: a finite, non-negative decimal number in ASCII ("2", "0.5", "1e3")."""
    value = float(text) if _DECIMAL.fullmatch(text.strip()) else math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds (ASCII digits, finite, not negative), got {text!r}"
        )
    return value


def seconds_in(low: float, high: float) -> Callable[[str], float]:
    """`seconds`, with the range the command accepts named when the text is no number at
    all (the command checks the range itself, exit 1, naming the option and the range)."""

    def parse(text: str) -> float:
        try:
            return seconds(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds from {low:g} to {high:g} (ASCII digits), "
                f"got {text!r}"
            ) from None

    parse.__name__ = "seconds"  # argparse names the type in some messages
    return parse


def integer(text: str) -> int:
    """A whole number in ASCII digits, '-' allowed first (models.digits.parse_ascii_int)."""
    try:
        return parse_ascii_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number in ASCII digits, got {text!r}"
        ) from None


def process_id(text: str) -> int:
    """A process id: a whole number in ASCII digits, 1 or more. psutil refuses a negative one
    with a ValueError (a traceback from `verify --pid -5`), and 0 is no process that can be
    watched (kill(2) reads it as the caller's own process group). A number past the largest
    pid is left to the command, which reports that no such process exists."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a process id, a whole number from 1 up, got {text!r}"
        )
    return value
