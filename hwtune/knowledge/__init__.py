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
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from hwtune.errors import KnowledgeError, ModelError
from hwtune.fs.trusted_read import RefusedFile, read_bounded
from hwtune.knowledge.grammar import validate_entry
from hwtune.models.convert import load
from hwtune.models.nesting import json_nesting_problem, unique_keys

DATA_DIR = Path(__file__).with_name("data")


class Entry(Protocol):
    @property
    def key(self) -> str: ...


E = TypeVar("E", bound=Entry)


def user_dirs(environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Where user-added knowledge is looked for, lowest precedence first.

    The XDG directory may be absent (most users add nothing); $HWTUNE_KNOWLEDGE_DIR is named
    on purpose, so one that is no directory is a KnowledgeError: a typo there would otherwise
    plan with the shipped tables while the user believes theirs are read."""
    from hwtune.paths import knowledge_dirs

    named = (os.environ if environ is None else environ).get("HWTUNE_KNOWLEDGE_DIR")
    if named and not os.path.isdir(named):
        what = "does not exist" if not os.path.lexists(named) else "is not a directory"
        raise KnowledgeError(
            f"HWTUNE_KNOWLEDGE_DIR={named}: {what}",
            hint="name the directory that holds your <table>.json files, or unset it",
        )
    if named and not os.access(named, os.R_OK | os.X_OK):
        # Its files would look absent (lexists fails with EACCES) and be skipped in silence.
        raise KnowledgeError(
            f"HWTUNE_KNOWLEDGE_DIR={named}: cannot be read (permission denied)",
            hint="make the directory readable and searchable by this user, or unset it",
        )
    return tuple(Path(d) for d in knowledge_dirs(environ))


# Caps checked before the JSON parser runs (issue 15). The largest shipped table is about
# 35 KB (microarchitectures.json): 1 MiB holds thirty times that, and bounds what a user's file
# (or /dev/zero named as one) costs to read.
MAX_KNOWLEDGE_BYTES = 1 << 20
# An entry nests about four levels (object, entries list, entry, a list in it); json's scanner
# recurses per level and fails near 1000 (a file of 200,000 `[` raised RecursionError).
MAX_KNOWLEDGE_NESTING = 32


def _read_entries(path: Path) -> list[Any]:
    try:
        text = read_bounded(path, MAX_KNOWLEDGE_BYTES, check_owner=False, follow=True).decode()
    except RefusedFile as err:
        raise KnowledgeError(f"{path}: cannot read: {err.why}") from None
    except UnicodeDecodeError as err:
        raise KnowledgeError(f"{path}: cannot read: {err}") from None
    problem = json_nesting_problem(text, MAX_KNOWLEDGE_NESTING)
    if problem:
        raise KnowledgeError(f"{path}: {problem}; not a knowledge file")
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except RecursionError:  # a backstop: the scan above refuses what nests this deep
        raise KnowledgeError(f"{path}: invalid JSON: nested too deeply") from None
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
        if path.parent != DATA_DIR and not os.path.lexists(path):
            continue  # a user directory need not replace every table
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
