"""Did the job get the plan? The same checks as `hwtune verify`, for the doctor's findings."""

from __future__ import annotations

from dataclasses import replace

from hwtune.apply.render import INTER_OP_ENV
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
    return [_inter_op_at_least(c, seen.environ.get(INTER_OP_ENV)) for c in compare(expected, seen)]


def _inter_op_at_least(check: Check, variable: str | None) -> Check:
    """More tf_Compute threads than the planned pool, with the variable as planned, is no
    mismatch: TF 2.21 starts further pools named "Compute" as a Keras job runs (with
    TF_NUM_INTEROP_THREADS=1, one tf_Compute thread after the first op, two after `fit`,
    six in the compute-bound test job), so only fewer threads than planned is one."""
    if not check.setting.startswith("inter-op pool") or check.status != "DIFFERENT":
        return check
    if not (check.actual.isdigit() and check.expected.isdigit()):
        return check
    if int(check.actual) > int(check.expected) and variable == check.expected:
        return replace(
            check,
            status="OK",
            note=f"{check.actual} tf_Compute threads: TensorFlow names other pools Compute too",
        )
    return check
