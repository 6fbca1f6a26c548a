"""Arm core names by MIDR implementer and part (`knowledge/data/arm_parts.json`).

aarch64 /proc/cpuinfo prints no model name, only `CPU implementer` and `CPU part`; lscpu names
the core from the same pair (util-linux sys-utils/lscpu-arm.c), and so does this table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hwtune.errors import KnowledgeError
from hwtune.knowledge import load_table


@dataclass(frozen=True, slots=True)
class ArmPart:
    """One row of `arm_parts.json`: key "0x41:0xd49", the name lscpu prints."""

    key: str
    name: str
    source: str


def parse_key(key: str) -> tuple[int, int]:
    """ "0x41:0xd49" -> (0x41, 0xd49); a KnowledgeError otherwise."""
    implementer, colon, part = key.partition(":")
    try:
        if colon and implementer.startswith("0x") and part.startswith("0x"):
            return int(implementer, 16), int(part, 16)
    except ValueError:
        pass
    raise KnowledgeError(f"arm_parts: entry {key!r}: not 'IMPLEMENTER:PART' in hex (0x41:0xd49)")


@functools.lru_cache(maxsize=4)
def _by_ids(entries: tuple[ArmPart, ...]) -> dict[tuple[int, int], str]:
    # Keyed by the loaded table (itself cached by `load_table`), so the daemon's reload and a
    # changed $HWTUNE_KNOWLEDGE_DIR are seen, as microarch._compile does.
    return {parse_key(entry.key): entry.name for entry in entries}


def arm_part_name(implementer: int, part: int) -> str | None:
    """ "Neoverse-N2" for (0x41, 0xd49); None for a part the table does not know."""
    return _by_ids(load_table("arm_parts", ArmPart)).get((implementer, part))
