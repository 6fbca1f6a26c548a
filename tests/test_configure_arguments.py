"""`hwtune.configure()` given arguments of the wrong type: a warning naming the keyword (or
ConfigError with strict=True), and nothing changed; never a count taken from a bool or float,
nor a switch from a truthy string."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import hwtune
from hwtune.errors import ConfigError


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "LOCAL_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return _environ()


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def _hooks() -> list[str]:
    return [type(finder).__name__ for finder in sys.meta_path]


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"instances": "2"}, "configure(instances=): '2' is not a whole number"),
        ({"instances": True}, "configure(instances=): True is not a whole number"),
        ({"instances": 2.5}, "configure(instances=): 2.5 is not a whole number"),
        ({"instance": 1.0, "instances": 2}, "configure(instance=): 1.0 is not a whole number"),
        ({"tensorflow": "no"}, "configure(tensorflow='no'): expected True or False"),
        ({"use_cache": 1}, "configure(use_cache=1): expected True or False"),
        ({"measured": None}, "configure(measured=None): expected True or False"),
    ],
)
def test_a_wrong_type_warns_naming_the_keyword_and_changes_nothing(
    clean_env: dict[str, str], keywords: dict[str, Any], named: str
) -> None:
    """Before: instances="2" failed with "'<' not supported between instances of 'str' and
    'int'", True planned one instance, 2.5 reached the planner ("2.5 physical cores"), and
    tensorflow="no" installed the TensorFlow import hook it was meant to skip."""
    hooks = _hooks()
    with pytest.warns(RuntimeWarning, match=r"hwtune\.configure: .*") as caught:
        report = hwtune.configure(**keywords)
    assert named in str(caught[0].message)
    assert report.env_set == {}
    assert _environ() == clean_env
    assert _hooks() == hooks


def test_strict_raises_the_config_error(clean_env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"configure\(tensorflow='no'\)"):
        hwtune.configure(tensorflow="no", strict=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"configure\(instances=\): '2'"):
        hwtune.configure(instances="2", strict=True, tensorflow=False)  # type: ignore[arg-type]
    assert _environ() == clean_env
