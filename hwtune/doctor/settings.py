"""Did the job get the plan? The same checks as `hwtune verify`, for the doctor's findings."""

from __future__ import annotations

from hwtune.apply.verify import Check, compare, expected_for, observe


def settings_checks(pid: int, root: str = "/") -> list[Check]:
    """verify's checks of `pid` against the profile its own environment asks for."""
    from hwtune.pipeline.request import PlanRequest, profile_for

    seen = observe(pid)
    if seen is None:
        return []
    # The process's own rank/instance variables choose its slice, as for `hwtune verify`.
    expected = expected_for(profile_for(PlanRequest(seen.environ, root=root)))
    return compare(expected, seen)
