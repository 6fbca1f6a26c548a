"""The issue log every probe writes to: failures and partial results, never exceptions."""

from __future__ import annotations

from pathlib import Path

from hwtune.models.hardware import ProbeIssue
from hwtune.models.words import plural

# A reason is one line for a person: what failed, where, and at most a short excerpt of the
# file (issue 15: a file that failed to parse is never printed beyond that).
MAX_REASON = 240
EXCERPT = 60
# Issues kept per (probe, file): a hostile 32 MiB file of bad lines would otherwise log one
# issue per line; the rest are counted in one more issue.
MAX_PER_FILE = 100


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """A short, escaped quotation of file content for an issue: repr() of at most `limit`
    characters, with "..." when cut."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def printable(text: str) -> str:
    """`text` with every character str.isprintable() refuses (ESC, CR, BS, newlines, bidi
    overrides) written as its escape ("\\x1b"): a string from the machine or a capture shown
    on a terminal can then neither move the cursor, recolour nor rewrite what was printed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _one_line(reason: str) -> str:
    reason = printable(reason)
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


class IssueLog:
    """Collects `ProbeIssue`s in the order they happen; `freeze()` gives the tuple to keep."""

    def __init__(self) -> None:
        self._issues: list[ProbeIssue] = []
        self._per_file: dict[tuple[str, str], int] = {}
        self._dropped: dict[tuple[str, str], tuple[int, int | None]] = {}  # count, last line

    def add(
        self, probe: str, reason: str, path: str | Path | None = None, line: int | None = None
    ) -> None:
        where = None if path is None else str(path)
        if where is not None:
            key = (probe, where)
            kept = self._per_file.get(key, 0)
            if kept >= MAX_PER_FILE:
                count, _ = self._dropped.get(key, (0, None))
                self._dropped[key] = (count + 1, line)
                return
            self._per_file[key] = kept + 1
        reason = _one_line(reason)
        self._issues.append(ProbeIssue(probe=probe, reason=reason, path=where, line=line))

    def __len__(self) -> int:
        return len(self._issues) + len(self._dropped)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.freeze())

    def freeze(self) -> tuple[ProbeIssue, ...]:
        counted = [
            ProbeIssue(
                probe=probe,
                reason=f"{plural(count, 'more issue')} in this file, not listed",
                path=where,
                line=line,
            )
            for (probe, where), (count, line) in self._dropped.items()
        ]
        return (*self._issues, *counted)
