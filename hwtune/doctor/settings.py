"""Did the job get the plan? The same checks as `hwtune verify`, for the doctor's findings."""

from __future__ import annotations

from hwtune.apply.verify import Check, Expectation, compare, observe


def settings_checks(pid: int, root: str = "/") -> list[Check]:
    """verify's checks of `pid` against the profile its own environment asks for."""
    from hwtune.apply.launch import instance_slice
    from hwtune.apply.render import env_map, thread_counts
    from hwtune.pipeline.source import plan_for

    seen = observe(pid)
    if seen is None:
        return []
    # The process's own rank/instance variables choose its slice, as for `hwtune verify`.
    planned = plan_for({}, seen.environ, root=root)
    profile = planned.profile
    intra, inter = thread_counts(profile)
    mine = instance_slice(profile, profile.intent.instance)
    expected = Expectation(
        env=env_map(profile),
        cpus=mine.cpus,
        intra_op=intra,
        inter_op=inter,
        numa_nodes=mine.numa_nodes if len(planned.hardware.numa) > 1 else (),
    )
    return compare(expected, seen)
