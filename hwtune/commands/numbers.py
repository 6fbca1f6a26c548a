"""argparse types for the numbers flags take: ASCII only and finite.

Python's float() and int() take more than a person types: Unicode digits ("٣" is 3), "nan",
"inf", "1_000". A duration of NaN never compares true, so a `> 0` check passes it on to
time.sleep() or a deadline; an infinite one waits forever. Both are refused at the flag, with
argparse's usage line and exit 2, like every other bad value. A flag with a range
(`seconds_in`) takes any finite number and leaves the range to the command (`out_of_range`,
exit 1), so every value out of range, negative or not, gets one exit code and message.
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


def positive_seconds(text: str) -> float:
    """A duration that must be over 0 (a budget, a timeout): `seconds`, and 0 refused too,
    at the flag, with exit 2 like any other bad value."""
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds over 0 (ASCII digits, finite), got {text!r}"
        )
    return value


def number_text(value: float) -> str:
    """A number as a person writes it: 315360000, not `:g`'s 3.1536e+08; 0.4, -5, 1e+300."""
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def seconds_range(low: float, high: float, high_words: str | None = None) -> str:
    """ "from 60 to 315360000 (10 years)", for the messages of a flag's range."""
    words = f" ({high_words})" if high_words else ""
    return f"from {number_text(low)} to {number_text(high)}{words}"


def seconds_in(low: float, high: float, high_words: str | None = None) -> Callable[[str], float]:
    """Any finite number of seconds in ASCII, negative ones too: the command checks the
    range itself (exit 1, `out_of_range`), so -5 and 59.9 get the same exit code and
    message. Text that is no finite number ("abc", "nan", "inf") is a usage error (exit 2)
    naming the range."""

    def parse(text: str) -> float:
        value = float(text) if _DECIMAL.fullmatch(text.strip()) else math.nan
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds {seconds_range(low, high, high_words)} "
                f"(ASCII digits), got {text!r}"
            )
        return value

    parse.__name__ = "seconds"  # argparse names the type in some messages
    return parse


def out_of_range(
    option: str, value: float, low: float, high: float, high_words: str | None = None
) -> str | None:
    """The message for a value of `option` outside low..high (both taken), else None: one
    shape for every value out of range, -5 as 59.9 or 1e+300."""
    if low <= value <= high:  # also refuses nan and inf
        return None
    return (
        f"{option} {number_text(value)}: must be a number of seconds "
        f"{seconds_range(low, high, high_words)}"
    )


def integer(text: str) -> int:
    """A whole number in ASCII digits, '-' allowed first (models.digits.parse_ascii_int)."""
    try:
        return parse_ascii_int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number in ASCII digits, got {text!r}"
        ) from None


def integer_from(low: int, why: str) -> Callable[[str], int]:
    """A whole number in ASCII digits, `low` or more; `why` says what needs that much. A
    smaller one is a usage error (exit 2), as text that is no number is."""

    def parse(text: str) -> int:
        return _whole_from(text, low, f"a whole number from {low} up ({why})")

    parse.__name__ = "integer"  # argparse names the type in some messages
    return parse


def process_id(text: str) -> int:
    """A process id: a whole number in ASCII digits, 1 or more. psutil refuses a negative one
    with a ValueError (a traceback from `verify --pid -5`), and 0 is no process that can be
    watched (kill(2) reads it as the caller's own process group). A number past the largest
    pid is left to the command, which reports that no such process exists."""
    return _whole_from(text, 1, "a process id, a whole number from 1 up")


def _whole_from(text: str, low: int, expected: str) -> int:
    """`integer`, and one under `low` refused as a usage error saying what was `expected`."""
    value = integer(text)
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value
