"""The issue log every probe writes to: failures and partial results, never exceptions."""

from __future__ import annotations

from pathlib import Path

from hwtune.models.hardware import ProbeIssue


class IssueLog:
    """Collects `ProbeIssue`s in the order they happen; `freeze()` gives the tuple to keep."""

    def __init__(self) -> None:
        self._issues: list[ProbeIssue] = []

    def add(
        self, probe: str, reason: str, path: str | Path | None = None, line: int | None = None
    ) -> None:
        where = None if path is None else str(path)
        self._issues.append(ProbeIssue(probe=probe, reason=reason, path=where, line=line))

    def __len__(self) -> int:
        return len(self._issues)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._issues)

    def freeze(self) -> tuple[ProbeIssue, ...]:
        return tuple(self._issues)
