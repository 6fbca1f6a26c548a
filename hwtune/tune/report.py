"""The human report of `hwtune tune` (the `--json` one is TuneReport.as_json)."""

from __future__ import annotations

import shlex
import textwrap

from hwtune.models.words import plural
from hwtune.tune.progress import clock_text, rate_text
from hwtune.tune.space import changed
from hwtune.tune.tuner import TuneReport


def _value(value: object, metric: object) -> str:
    """A median as the report shows it: one decimal from 100 on, as before e7e04d0 (1,234.5),
    significant digits below (rate_text)."""
    if not isinstance(value, float):
        return "not measured"
    return f"{rate_text(value, decimals=1)} {metric}"


def render_report(report: TuneReport) -> str:
    outcome, record = report.outcome, report.record
    request = report.request
    metric = record.get("metric") or "per second"
    stopped = {
        "converged": "converged (no neighbour clearly better)",
        "budget": "stopped by the budget",
    }.get(outcome.stopped, outcome.stopped)
    lines = [
        f"hwtune tune: {request.workload.display} — {request.mode} mode, "
        f"{request.model} model, hardware {report.fingerprint}",
        f"  {plural(len(outcome.trials), 'trial')} in {clock_text(outcome.elapsed_s)} "
        f"(budget {clock_text(request.budget_s)}) over a space of {report.space.size()} "
        f"configurations; {stopped}; noise ±{outcome.noise:.1%}",
        f"  plan:  {outcome.start.label():<48} {_value(record.get('start_median'), metric)}",
        f"  best:  {outcome.best.label():<48} {_value(record.get('best_median'), metric)}",
    ]
    moved = changed(outcome.start, outcome.best)
    if moved:
        confirmed = outcome.confirmation
        interval = (
            f", 95% interval {confirmed.low:.2f}-{confirmed.high:.2f}× re-measured"
            if confirmed
            else ", the races' estimate, which runs high: not re-measured side by side (a "
            "larger --budget leaves time to)"
        )
        lines.append(
            f"         {outcome.ratio:.2f}× over the rule's choice{interval} "
            f"(changed: {', '.join(moved)})"
        )
    else:
        lines.append("         the plan's choice held: no change was clearly better")
    lines.extend(f"  note: {note}" for note in outcome.notes)
    if outcome.failures:
        lines.append(f"  {plural(len(outcome.failures), 'failed trial')}, never counted:")
        for trial in outcome.failures:
            lines.append(f"    {trial.config.label()}: {trial.failure}")
            if trial.stderr_tail:
                lines.append(textwrap.indent(trial.stderr_tail, "      | "))
    if report.path is not None:
        lines.append(f"  stored: {report.path}")
        # A result applies only where its workload is named (docs/tune.md): "now used" read
        # as if a plain `hwtune apply` would take it.
        key = request.workload.key
        lines.append(
            f"  used where the workload is named: `--workload {shlex.quote(key)}` on plan, "
            f"apply, env, exec and verify, hwtune.configure(workload={key!r}), or "
            f"HWTUNE_WORKLOAD={shlex.quote(key)}"
        )
    elif report.store_error is not None:
        lines.append(f"  not stored: {report.store_error}")
    else:
        lines.append("  not stored (--no-store)")
    return "\n".join(lines) + "\n"
