"""Counts in words, for reasons and messages: "1 usable CPU", "2 usable CPUs".

A count that can be 1 goes through `plural`, so a one-CPU slice or container does not read
"1 usable CPUs". This module imports nothing, so any module can use it at no start-up cost.
"""

from __future__ import annotations


def plural(count: float, noun: str) -> str:
    """`count` and `noun`, the noun singular for exactly one and given an "s" otherwise.
    A float prints as `:g` does, as cgroup quotas are written ("quota 1.5 CPUs").

    >>> plural(1, "usable CPU"), plural(2, "usable CPU"), plural(1.0, "CPU"), plural(0.5, "CPU")
    ('1 usable CPU', '2 usable CPUs', '1 CPU', '0.5 CPUs')
    """
    shown = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{shown} {noun}" if count == 1 else f"{shown} {noun}s"
