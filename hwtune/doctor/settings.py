"""Did the job get the plan? The same checks as `hwtune verify`, for the doctor's findings."""

from __future__ import annotations

from hwtune.apply.verify import Check, check_job_environment, compare, expected_for, observe


def settings_checks(pid: int, root: str = "/") -> list[Check]:
    """verify's checks of `pid` against the profile its own environment asks for, planned
    for the CPUs the job may use (its affinity and cgroup limits, as `hwtune verify` plans):
    a job under `taskset` or in a cgroup with a CPU quota was planned by its configure() or
    `hwtune exec` for what it may use, which the doctor's own /proc/self does not show (it
    reported such a job's correct settings as "did not take effect"). A malformed launcher or
    HWTUNE_* variable of the job is a ConfigError naming the job's pid, as verify's."""
    from dataclasses import replace
    from pathlib import Path

    from hwtune.pipeline.request import PlanRequest, profile_for
    from hwtune.probes import detect, is_live

    seen = observe(pid)
    if seen is None:
        return []
    # The process's own rank/instance variables choose its slice, as for `hwtune verify`.
    check_job_environment(seen)
    request = PlanRequest(seen.environ, root=root)
    if is_live(Path(root).absolute()):
        request = replace(request, hardware=detect(root, pid=str(pid)))
    return compare(expected_for(profile_for(request)), seen)
