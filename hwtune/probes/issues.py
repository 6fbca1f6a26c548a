"""The issue log every probe writes to: failures and partial results, never exceptions."""

from __future__ import annotations

from pathlib import Path

from hwtune.models.hardware import ProbeIssue

# A reason is one line for a person: what failed, where, and at most a short excerpt of the
# file (issue 15: a file that failed to parse is never printed beyond that).
MAX_REASON = 240
EXCERPT = 60


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """A short, escaped quotation of file content for an issue: repr() of at most `limit`
    characters, with "..." when cut."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _one_line(reason: str) -> str:
    if not reason.isprintable():
        reason = "".join(c if c.isprintable() else repr(c)[1:-1] for c in reason)
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


class IssueLog:
    """Collects `ProbeIssue`s in the order they happen; `freeze()` gives the tuple to keep."""

    def __init__(self) -> None:
        self._issues: list[ProbeIssue] = []

    def add(
        self, probe: str, reason: str, path: str | Path | None = None, line: int | None = None
    ) -> None:
        where = None if path is None else str(path)
        reason = _one_line(reason)
        self._issues.append(ProbeIssue(probe=probe, reason=reason, path=where, line=line))

    def __len__(self) -> int:
        return len(self._issues)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._issues)

    def freeze(self) -> tuple[ProbeIssue, ...]:
        return tuple(self._issues)
