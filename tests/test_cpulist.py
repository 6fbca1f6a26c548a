"""The kernel CPU-list grammar: examples from the kernel docs, then properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.models.cpulist import MAX_CPU, CpuListError, format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("", ()),
        ("\n", ()),
        ("0", (0,)),
        ("0-3\n", (0, 1, 2, 3)),
        ("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)),
        ("3,1,2,1", (1, 2, 3)),
        (" 0 - 1 , 4 ", (0, 1, 4)),
        # Documentation/admin-guide/kernel-parameters.rst: "0-9:2/4" and "100-1000:2/25"
        ("0-9:2/4", (0, 1, 4, 5, 8, 9)),
        ("0-7:4/4", tuple(range(8))),
    ],
)
def test_parse_examples(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize(
    "text", ["a", "1-", "-1", "3-1", "0,,1", "1-2:0/4", "1-2:5/4", "1-2:2", "٣", f"0-{MAX_CPU}"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(CpuListError):
        parse_cpulist(text)


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=300))
def test_format_then_parse_round_trips(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


@given(st.text(max_size=40))
def test_parse_never_raises_anything_but_cpulisterror(text: str) -> None:
    try:
        cpus = parse_cpulist(text)
    except CpuListError:
        return
    assert all(0 <= c < MAX_CPU for c in cpus)


def test_lists_naming_more_cpus_than_exist_are_refused_before_expanding() -> None:
    """The kernel prints each CPU once; "0-65535" repeated through a 1 MiB cpuset file would
    otherwise be ~8.6e9 set insertions (minutes)."""
    with pytest.raises(CpuListError, match="more than"):
        parse_cpulist(",".join(["0-65535"] * 20_000))
    with pytest.raises(CpuListError, match="more than"):
        parse_cpulist(",".join(["0-65535:1/1"] * 20_000))
    assert parse_cpulist("0-65535") == tuple(range(65536))
    with pytest.raises(CpuListError) as error:
        parse_cpulist("0-3," + "x" * 100_000)
    assert len(str(error.value)) < 200  # a file's worth of list is not quoted whole
