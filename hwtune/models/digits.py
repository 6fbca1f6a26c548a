"""Numbers as kernel files, tools and launchers write them: ASCII digits 0-9, nothing else.

`str.isdigit()` is not that test. It is also True for every other Unicode digit:
- superscripts and circled digits ('²', '①'), which `int()` refuses with a bare ValueError
  (found by the reliability suite's long run in the lscpu parser, then in eight more);
- Arabic-Indic and other decimal digits ('٣'), which `int()` accepts, but which no kernel
  file, tool output or launcher variable ever holds: such a "number" is garbage, not data.

Every check that decides whether text is fed to `int()` (or read as a number) uses
`is_ascii_digits`. This module imports nothing, so any module can use it at no start-up cost.
"""

from __future__ import annotations


def is_ascii_digits(text: str) -> bool:
    """True when `text` is one or more ASCII digits: no sign, space or underscore either.

    >>> is_ascii_digits("42"), is_ascii_digits("4²"), is_ascii_digits("٣"), is_ascii_digits("")
    (True, False, False, False)
    """
    # isascii() first: on ASCII text, isdigit() is exactly [0-9]+.
    return text.isascii() and text.isdigit()


def parse_ascii_int(text: str) -> int:
    """The whole number `text` spells in ASCII digits, with an optional leading '-' and
    surrounding whitespace; ValueError otherwise (`int()` also takes '٢', '+2' and '1_0').

    >>> parse_ascii_int(" 12 "), parse_ascii_int("-3")
    (12, -3)
    """
    stripped = text.strip()
    digits = stripped[1:] if stripped.startswith("-") else stripped
    if not is_ascii_digits(digits):
        raise ValueError(f"{text!r} is not a whole number in ASCII digits")
    return int(stripped)


# The most digits a number in a hardware model has (2**64 has 20): what `plan --hardware` reads
# (pipeline/request.py MAX_NUMBER_DIGITS), so everything `detect --json` writes is read back.
MAX_DIGITS = 20
U64_LIMIT = 1 << 64


def parse_u64(text: str, *, signed: bool = False) -> int:
    """`parse_ascii_int` of a kernel or tool number, bounded: at most MAX_DIGITS digits and of
    magnitude below 2**64; a leading '-' only when `signed` (the kernel's -1 "none").
    ValueError, saying which, otherwise.

    >>> parse_u64("18446744073709551615"), parse_u64("-1", signed=True)
    (18446744073709551615, -1)
    """
    stripped = text.strip()
    digits = stripped[1:] if signed and stripped.startswith("-") else stripped
    if not is_ascii_digits(digits):
        raise ValueError(f"{stripped[:24]!r} is not a whole number in ASCII digits")
    if len(digits) > MAX_DIGITS or int(digits) >= U64_LIMIT:
        shown = digits if len(digits) <= MAX_DIGITS else f"{digits[:12]}… ({len(digits)} digits)"
        raise ValueError(f"{shown} is beyond 2**64, more than any count or size a machine has")
    return int(stripped)


def within_u64(value: int) -> bool:
    """True for a product (kB × 1024, a size × its unit) that still fits in 2**64."""
    return -U64_LIMIT < value < U64_LIMIT
