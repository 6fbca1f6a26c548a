"""Did the job get the plan? The same checks as `hwtune verify`, for the doctor's findings."""

from __future__ import annotations

from dataclasses import replace

from hwtune.apply.render import INTER_OP_ENV
from hwtune.apply.verify import Check, compare, expected_for, observe


def settings_checks(pid: int, root: str = "/") -> list[Check]:
    """verify's checks of `pid` against the profile its own environment asks for."""
    from hwtune.pipeline.request import PlanRequest, profile_for

    seen = observe(pid)
    if seen is None:
        return []
    # The process's own rank/instance variables choose its slice, as for `hwtune verify`.
    expected = expected_for(profile_for(PlanRequest(seen.environ, root=root)))
    # The variable as the job started with it, or as configure() set it inside (its record).
    recorded = (seen.record or {}).get("env", {})
    variable = seen.environ.get(INTER_OP_ENV) or recorded.get(INTER_OP_ENV)
    return [_inter_op_at_least(c, variable) for c in compare(expected, seen)]


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
