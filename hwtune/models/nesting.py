"""How deeply a JSON or TOML text nests, measured before it is parsed.

Python's parsers recurse once per level of nesting (json's scanner, tomllib's arrays and inline
tables) and raise RecursionError past about 1000 levels: a 10 KB config.toml of 5000 nested
arrays, or a knowledge file of 200,000 `[`, ended in a traceback. tomllib also copies the key
so far for every part of a dotted key, so one 40 KB key of 20,000 parts cost 1.6 GB of memory
(quadratic). A cheap lexical scan, which skips strings and comments, finds both before the
parser runs, so the caller can refuse the file with one line naming it.

`unique_keys`, an object hook for json.loads, refuses a key given twice in one object, which
json keeps silently (the last wins) while the TOML config refuses it: a knowledge entry or a
hardware model with "compute_capability" twice holds a mistake, not a choice.

Imports nothing but `re`: a model, not I/O.
"""

from __future__ import annotations

import re
from typing import Any

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
# TOML tokens that matter here; strings (all four kinds) and comments are matched whole so
# that a bracket or dot inside them is skipped (TOML 1.0: strings, comments, keys).
_TOML_TOKEN = re.compile(
    r'"""(?:[^\\]|\\.)*?"""'
    r"|'''[\s\S]*?'''"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|'[^'\n]*'"
    r"|#[^\n]*"
    r"|[\[\]{}.\n]",
    re.DOTALL,
)


def json_nesting_problem(text: str, max_depth: int) -> str | None:
    """Why `text` nests too deeply to be parsed safely, or None."""
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, match.start()) + 1
                return f"nested more than {max_depth} levels deep (near line {line})"
        else:
            depth = max(0, depth - 1)
    return None


def toml_nesting_problem(text: str, max_depth: int, max_key_parts: int) -> str | None:
    """Why `text` nests too deeply (arrays, inline tables) or has a dotted key of too many
    parts to be parsed safely, or None. Dots are counted per line outside strings and
    comments: a key (or table header) never spans lines, and a number has at most one."""
    depth = 0
    dots = 0
    line = 1
    for match in _TOML_TOKEN.finditer(text):
        token = match.group()
        if token == "\n":
            line, dots = line + 1, 0
        elif token == ".":
            dots += 1
            if dots >= max_key_parts:
                return f"line {line}: a key of more than {max_key_parts} dotted parts"
        elif token in "[{":
            depth += 1
            if depth > max_depth:
                return f"line {line}: nested more than {max_depth} levels deep"
        elif token in "]}":
            depth = max(0, depth - 1)
        else:  # a string or comment: it may span lines
            line += token.count("\n")
    return None


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads's `object_pairs_hook`: the object, or ValueError naming a repeated key."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"key {key[:40]!r} given twice in one object")
        found[key] = value
    return found
