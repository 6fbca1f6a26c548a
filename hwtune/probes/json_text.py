"""JSON from a capture (`lscpu -J` saved as lscpu.txt, tensorflow.json), parsed without raising
anything but `JsonRefused`.

`json.loads` raises more than JSONDecodeError on hostile text, each of which escaped the probes
and lost every other source with them:
- RecursionError: its scanner recurses once per `[`/`{` and fails near 1000 levels (a file of
  1000 `[` is 1 KB); the nesting is measured first (hwtune/models/nesting.py, as the knowledge
  loader does) and RecursionError stays a backstop;
- ValueError: an integer of more than 4300 digits (int() refuses it, the default of
  sys.set_int_max_str_digits since Python 3.11); integers are bounded far below that;
- NaN, Infinity and -Infinity are accepted by default though not JSON (RFC 8259 section 6),
  and a float such as 1e400 becomes inf: neither is a value a capture holds, and either would
  come back out of `detect --json` as invalid JSON.
The size is already bounded by the read (probes.root caps every file).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hwtune.models.nesting import json_nesting_problem

# No count, size or id a capture holds needs more than 128 bits (39 digits); int() itself
# refuses over 4300 digits with a ValueError that names an interpreter setting.
MAX_INT_DIGITS = 40


class JsonRefused(ValueError):
    """Text that is not JSON a capture can hold; `line` is 1-based when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def _refuse_constant(name: str) -> None:
    raise JsonRefused(f"invalid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"invalid JSON: {text[:20]} is beyond a double's range")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise JsonRefused(f"invalid JSON: a number of {len(text)} digits")
    return int(text)


def loads_bounded(text: str, max_depth: int) -> Any:
    """`text` parsed as JSON nested at most `max_depth` levels, finite numbers only; anything
    else raises `JsonRefused` with a one-line reason."""
    problem = json_nesting_problem(text, max_depth)
    if problem:
        raise JsonRefused(f"invalid JSON: {problem}")
    try:
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except JsonRefused:
        raise
    except json.JSONDecodeError as err:
        raise JsonRefused(f"invalid JSON: {err.msg}", err.lineno) from None
    except RecursionError:  # a backstop: the scan above refuses what nests this deep
        raise JsonRefused("invalid JSON: nested too deeply") from None
    except ValueError as err:  # a backstop: no other ValueError is known to escape
        raise JsonRefused(f"invalid JSON: {str(err)[:100]}") from None
