"""Knowledge as data: microarchitectures, GPUs, TensorFlow versions, validated when loaded.

Each table is `hwtune/knowledge/data/<table>.json` holding `{"_doc": "...", "entries": [...]}`.
Every entry has a `key` (unique within the table) and a `source` (where the fact comes from).
A user adds or replaces entries with files of the same name in a directory named by
`$HWTUNE_KNOWLEDGE_DIR`, or in `$XDG_CONFIG_HOME/hwtune/knowledge/`: an entry whose key matches
a shipped one replaces it, others are added. Entries are validated with `models.convert.load`
against the table's dataclass, then every field against its grammar (`grammar.py`: a flag is
one token, a label a Bazel label), so a bad file fails with its path and the key path inside it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hwtune.errors import KnowledgeError, ModelError
from hwtune.knowledge.grammar import validate_entry
from hwtune.models.convert import load

DATA_DIR = Path(__file__).with_name("data")


class Entry(Protocol):
    @property
    def key(self) -> str: ...


E = TypeVar("E", bound=Entry)


def user_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Where user-added knowledge is looked for, lowest precedence first."""
    from hwtune.paths import knowledge_dirs

    return tuple(Path(d) for d in knowledge_dirs(environ))


def _read_entries(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise KnowledgeError(f"{path}: cannot read: {err}") from err
    except json.JSONDecodeError as err:
        raise KnowledgeError(f"{path}: line {err.lineno}: invalid JSON: {err.msg}") from err
    except ValueError as err:  # e.g. an integer of more than 4300 digits (int() refuses it)
        raise KnowledgeError(f"{path}: invalid JSON: {err}") from err
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise KnowledgeError(f"{path}: expected an object with an 'entries' list")
    entries: list[Any] = data["entries"]
    return entries


def load_table(
    table: str, entry_cls: type[E], extra_dirs: tuple[Path, ...] | None = None
) -> tuple[E, ...]:
    """The entries of `table`: shipped ones, then user ones replacing by key or appended."""
    return _load_table(table, entry_cls, user_dirs() if extra_dirs is None else extra_dirs)


@functools.cache
def _load_table(table: str, entry_cls: type[E], extra_dirs: tuple[Path, ...]) -> tuple[E, ...]:
    merged: dict[str, E] = {}
    for path in (DATA_DIR / f"{table}.json", *(d / f"{table}.json" for d in extra_dirs)):
        if path.parent != DATA_DIR and not path.is_file():
            continue
        for i, raw in enumerate(_read_entries(path)):
            where = f"{path}: entries[{i}]"
            try:
                entry = load(entry_cls, raw, where=where)
            except ModelError as err:
                raise KnowledgeError(err.message, hint=err.hint) from err
            validate_entry(table, entry, where)
            merged.pop(entry.key, None)  # a replaced entry moves to the end: user wins ties
            merged[entry.key] = entry
    return tuple(merged.values())


def clear_cache() -> None:
    """Forget loaded tables (tests, and the daemon after a knowledge file changes)."""
    _load_table.cache_clear()
