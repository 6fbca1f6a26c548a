"""The reliability suite's scale and its figures.

Scale: the default run tries a few hundred examples per parser and a few dozen kills; the long
run tries at least 10,000 examples per parser and 200+ kills. The long run is
`pytest tests/reliability -m slow`, or HWTUNE_RELIABILITY=long, or
`python -m tests.reliability.report --long` (which also writes docs/RELIABILITY.md).

Figures: every test records what it tried and what came of it through the `figures` fixture.
When HWTUNE_RELIABILITY_FIGURES names a file, the records are appended to it as JSON lines,
and `tests/reliability/report.py` turns them into docs/RELIABILITY.md. Each test's outcome and
duration are appended too (kind "result"), so the report shows failures and skips as well.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.conftest import DATA, REPO

REPO_ROOT = REPO

LONG = False
FUZZ_EXAMPLES = SECONDARY_EXAMPLES = KILL_ROUNDS = SIGNAL_ROUNDS = TREE_EXAMPLES = 0
fuzz_settings = secondary_settings = tree_settings = settings()


def _set_scale(long: bool) -> None:
    """The default or the long scale; test modules read these names when they are imported."""
    global LONG, FUZZ_EXAMPLES, SECONDARY_EXAMPLES, KILL_ROUNDS, SIGNAL_ROUNDS, TREE_EXAMPLES
    global fuzz_settings, secondary_settings, tree_settings
    LONG = long
    FUZZ_EXAMPLES = 10_000 if long else 300
    # Parsers beyond the issue's list (hwtune's own files, launcher variables): fewer by
    # default to keep the default run short, as many in the long run.
    SECONDARY_EXAMPLES = 10_000 if long else 120
    KILL_ROUNDS = 200 if long else 25
    # Rounds of "signal `hwtune exec` at a random moment", and whole-tree fault examples.
    SIGNAL_ROUNDS = 60 if long else 6
    TREE_EXAMPLES = 2_000 if long else 150
    settings.register_profile(
        "reliability",
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        # The `figures` fixture is shared by every example of a test (it counts them).
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
        derandomize=not long,  # the default run is reproducible; the long run explores
        database=None,  # nothing written into the checkout; failures print their reproducer
        print_blob=True,
    )
    fuzz_settings = settings.get_profile("reliability")
    secondary_settings = settings(fuzz_settings, max_examples=SECONDARY_EXAMPLES)
    tree_settings = settings(fuzz_settings, max_examples=TREE_EXAMPLES)


_set_scale(os.environ.get("HWTUNE_RELIABILITY") == "long")


def _selects_slow(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr") or ""
    return "slow" in expression and "not slow" not in expression


def pytest_configure(config: pytest.Config) -> None:
    """`-m slow` selects the long run (this runs before the test modules are imported)."""
    if _selects_slow(config) and not LONG:
        _set_scale(True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `-m slow` every reliability test is a slow one (the suite runs at the long
    scale); otherwise they are ordinary tests, in the default run (`-m 'not slow'`) too."""
    if LONG and _selects_slow(config):
        for item in items:
            if item.nodeid.startswith("tests/reliability/"):
                item.add_marker(pytest.mark.slow)


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


def _append(line: dict[str, object]) -> None:
    target = os.environ.get("HWTUNE_RELIABILITY_FIGURES")
    if target:
        with Path(target).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, default=str) + "\n")


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    record = Figures(request.node.nodeid)
    started = time.monotonic()
    yield record
    _append(
        {
            "kind": "figures",
            "test": record.test,
            "outcomes": dict(record.outcomes),
            "notes": record.notes,
            "long": LONG,
            "seconds": round(time.monotonic() - started, 3),
        }
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record each test's outcome (pass, fail, skip with its reason) and its duration."""
    if report.when == "call" or (report.when == "setup" and not report.passed):
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2])
        elif report.failed:
            reason = (
                str(report.longreprtext).strip().splitlines()[-1:][0][:300]
                if report.longreprtext
                else ""
            )
        outcome: str = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
            reason = str(report.wasxfail)
        _append(
            {
                "kind": "result",
                "test": report.nodeid,
                "outcome": outcome,
                "seconds": round(report.duration, 3),
                "reason": reason,
                "long": LONG,
            }
        )


# ---------------------------------------------------------------------------- seeds


class Seeds(list):  # type: ignore[type-arg]
    """Captures to mutate; a short repr keeps hypothesis's failure reports readable."""

    def __repr__(self) -> str:
        return f"<{len(self)} captures>"


def _texts(paths: list[Path]) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(paths) if p.is_file()]


def _shared(request: pytest.FixtureRequest) -> Path | None:
    """../shared/fixtures/hw through the `shared_hw` fixture, or None when it is absent."""
    try:
        path: Path = request.getfixturevalue("shared_hw")
    except pytest.skip.Exception:
        return None
    return path


@pytest.fixture
def cpuinfo_seeds(request: pytest.FixtureRequest) -> list[str]:
    paths = list(DATA.glob("hosts/*/proc/cpuinfo"))
    shared = _shared(request)
    if shared is not None:
        paths += list(shared.glob("*.cpuinfo"))
    live = Path("/proc/cpuinfo")
    texts = _texts(paths) + ([live.read_text(errors="replace")] if live.is_file() else [])
    assert texts, "no cpuinfo capture found under tests/data"
    return Seeds(texts)


@pytest.fixture
def lscpu_seeds(request: pytest.FixtureRequest) -> list[str]:
    paths = list(DATA.glob("hosts/*/lscpu.txt"))
    shared = _shared(request)
    if shared is not None:
        paths += list(shared.glob("*.lscpu"))
    texts = _texts(paths)
    assert texts, "no lscpu capture found under tests/data"
    return Seeds(texts)


@pytest.fixture
def smi_xml_seeds(request: pytest.FixtureRequest) -> list[bytes]:
    paths = list(DATA.glob("gpu/*.smi")) + list(DATA.glob("hosts/*/nvidia-smi-q.xml"))
    shared = _shared(request)
    if shared is not None:
        paths += list(shared.glob("*.smi"))
    data = [p.read_bytes() for p in sorted(paths)]
    assert data, "no nvidia-smi -q -x capture found under tests/data"
    return Seeds(data)


@pytest.fixture
def topo_seeds(request: pytest.FixtureRequest) -> list[str]:
    paths = list(DATA.glob("gpu/*.topo")) + list(DATA.glob("hosts/*/nvidia-smi-topo.txt"))
    shared = _shared(request)
    if shared is not None:
        paths += list(shared.glob("*.topo"))
    texts = _texts(paths)
    assert texts, "no nvidia-smi topo -m capture found under tests/data"
    return Seeds(texts)


# ---------------------------------------------------------------------------- machine trees


@pytest.fixture(scope="session")
def machine_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This machine as `hwtune snapshot` saves it (no GPU or TensorFlow captures): a real
    /proc and /sys tree, read-only for tests (copy it with `machine_tree`)."""
    from hwtune.probes.snapshot import take_snapshot

    dest = tmp_path_factory.mktemp("snapshot") / "machine"
    take_snapshot(dest, gpus=False, tensorflow=False)
    return dest


@pytest.fixture
def machine_tree(machine_snapshot: Path, tmp_path: Path) -> Path:
    """A private copy of the machine snapshot, to break."""
    dest = tmp_path / "root"
    shutil.copytree(machine_snapshot, dest, symlinks=True)
    return dest


def check_issue_paths(figures: Figures, issues: object) -> None:
    """No issue says a probe raised; lines are 1-based. Issues without a file are allowed only
    as conclusions drawn from several sources ("microarchitecture unknown"): they are counted
    and their reasons listed in the figures. (That each parse problem becomes an issue naming
    its file is checked where the parser reports its problems: see test_fuzz_parsers.)"""
    noted = figures.notes.get("issues without a file", [])
    derived: set[str] = set(noted) if isinstance(noted, list) else set()
    for issue in issues:  # type: ignore[attr-defined]
        assert "probe failed unexpectedly" not in issue.reason, issue
        if issue.path is None:
            figures.count("derived issue (no single file)")
            derived.add(" ".join(issue.reason.split()[:4]))
        if issue.line is not None:
            assert issue.line >= 1, issue
    if derived:
        figures.note(**{"issues without a file": sorted(derived)[:12]})


def unexpected(issues: object) -> list[str]:
    """Issues that mean a probe raised (detect's catch-all), which the suite counts as bugs."""
    return [
        f"{i.probe}: {i.reason}"
        for i in issues  # type: ignore[attr-defined]
        if "probe failed unexpectedly" in i.reason
    ]


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts, chown, and writing as root is what is being tested)")
