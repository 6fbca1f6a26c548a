"""Rendering a diagnosis: pure functions from the diagnosis and the samples to text or JSON."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from hwtune.doctor.analysis import Diagnosis
from hwtune.doctor.metrics import GROUP_NAMES
from hwtune.doctor.samples import SampleSet
from hwtune.models.words import plural


def as_json(diagnosis: Diagnosis, data: SampleSet) -> dict[str, Any]:
    return {
        "pid": data.pid,
        "comm": data.comm,
        "bottleneck": diagnosis.bottleneck,
        "findings": [f.as_dict() for f in diagnosis.findings],
        "metrics": diagnosis.metrics.as_dict() if diagnosis.metrics else None,
        "notes": list(diagnosis.notes),
        "samples": data.as_dict(),
    }


def render_json(diagnosis: Diagnosis, data: SampleSet) -> str:
    return json.dumps(as_json(diagnosis, data), indent=1) + "\n"


def _wrap(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text, width=96, initial_indent=f"    {label:<9}", subsequent_indent=" " * 13
    ) or [f"    {label}"]


def render_text(diagnosis: Diagnosis, data: SampleSet) -> str:
    m = diagnosis.metrics
    lines = [f"pid {data.pid} ({data.comm}): bottleneck: {diagnosis.bottleneck}"]
    if m is not None:
        budget = plural(m.budget, "CPU")
        lines.append(f"  sampled {m.window_s:.1f} s; budget {budget} ({data.budget.reason})")
        lines.append("  CPUs used / wanted per thread group:")
        for group, name in GROUP_NAMES.items():
            if m.threads.get(group) or m.demand[group] > 0:
                lines.append(
                    f"    {name:<62} {m.busy[group]:5.2f} / {m.demand[group]:5.2f}"
                    f"  ({plural(m.threads.get(group, 0), 'thread')})"
                )
        if m.throttled_share is not None:
            lines.append(
                f"  CFS throttling: {m.throttled_share:.0%} of {m.periods} periods, "
                f"{m.throttled_s or 0:.1f} s"
            )
        if m.step_median_s is not None:
            lines.append(
                f"  steps: {m.steps} in the window, median {m.step_median_s * 1000:.1f} ms "
                "(Keras callback)"
            )
        if m.gpu_util is not None:
            lines.append(f"  GPU: {m.gpu_util:.0f}% busy, {m.gpu_memory or 0:.0%} memory used")
    if diagnosis.findings:
        lines.append("findings:")
    for number, finding in enumerate(diagnosis.findings, start=1):
        lines.append(f"  {number}. {finding.finding} [{finding.id}]")
        lines += _wrap("evidence", finding.evidence)
        lines += _wrap("fix", finding.fix)
    lines += [f"note: {n}" for n in diagnosis.notes]
    return "\n".join(lines) + "\n"
