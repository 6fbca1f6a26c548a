"""The reliability suite's scale and its figures.

Scale: the default run tries a few hundred examples per parser and a few dozen kills; the long
run (`python -m tests.reliability.report --long`, which sets HWTUNE_RELIABILITY=long) tries at
least 10,000 examples per parser and 200+ kills, and is also selected by `-m slow`.

Figures: every test records what it tried and what came of it through the `figures` fixture.
When HWTUNE_RELIABILITY_FIGURES names a file, the records are appended to it as JSON lines,
and `tests/reliability/report.py` turns them into docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

LONG = os.environ.get("HWTUNE_RELIABILITY") == "long"
FUZZ_EXAMPLES = 10_000 if LONG else 300
KILL_ROUNDS = 200 if LONG else 25

settings.register_profile(
    "reliability",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=not LONG,  # the default run is reproducible; the long run explores
)
fuzz_settings = settings.get_profile("reliability")


class Figures:
    """Counts outcomes for one test: `figures.count("issue")`, `figures.note(key=value)`."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.outcomes: Counter[str] = Counter()
        self.notes: dict[str, object] = {}

    def count(self, outcome: str, n: int = 1) -> None:
        self.outcomes[outcome] += n

    def note(self, **facts: object) -> None:
        self.notes.update(facts)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    record = Figures(request.node.nodeid)
    yield record
    target = os.environ.get("HWTUNE_RELIABILITY_FIGURES")
    if target:
        line = {"test": record.test, "outcomes": dict(record.outcomes), "notes": record.notes,
                "long": LONG}
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
