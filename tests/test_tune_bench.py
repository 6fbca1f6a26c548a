"""bench/bench_report.py turns a journal into the results table, targets and chart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import bench_report


def config(intra: int | None, jit: bool | None = None) -> str:
    return json.dumps(
        {"intra_op": intra, "inter_op": None, "onednn": None, "jit": jit, "precision": None,
         "instances": 1, "cpus": [], "extra_env": {}},
        sort_keys=True,
    )


def journal(tmp_path: Path) -> Path:
    defaults, plan, best = config(None), config(1), config(1, jit=False)
    entries: list[dict[str, object]] = [
        {"id": "header", "settings": {"quick": False, "oracle_rounds": 1, "final_rounds": 3,
                                      "seconds": 2.0}, "started": 0},
        {"id": "S3/space", "scenario": "S3", "phase": "space", "plan_s": 0.3},
        {"id": "S3/oracle/0", "scenario": "S3", "phase": "oracle", "round": 0, "config": best,
         "value": 100.0, "wall_s": 40.0, "failure": None},
        {"id": "S3/tune", "scenario": "S3", "phase": "tune", "measuring_s": 8.0, "trials": 1},
        {"id": "S3/columns/1", "scenario": "S3", "phase": "columns",
         "columns": {"defaults": defaults, "plan": plan, "tune": best, "oracle": best},
         "labels": {"defaults": "d", "plan": "p", "tune": "t", "oracle": "o"}},
        {"id": "S1/skipped/1", "scenario": "S1", "phase": "skipped", "reason": "not root"},
        {"id": "budget/bench_plan.py", "phase": "budget", "script": "bench_plan.py",
         "status": "missing"},
        {"id": "runtime/1", "phase": "runtime", "wall_s": 600.0},
    ]
    # Round levels drift 2× while plan stays 1.5× defaults and the best 1.6×.
    for round_, level in enumerate((1.0, 0.5, 1.0)):
        for key, value in ((defaults, 60.0), (plan, 90.0), (best, 96.0)):
            noise = 1 + 0.01 * ((round_ + len(key)) % 3 - 1)
            entries.append({"id": f"S3/final/{round_}/{key}", "scenario": "S3",
                            "phase": "final", "round": round_, "config": key,
                            "value": value * level * noise, "wall_s": 10.0, "failure": None})
    path = tmp_path / "m.journal.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_report_has_the_table_targets_and_reasons(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    md = bench_report.write(journal(tmp_path), tmp_path, "m").read_text()
    assert "| S1 CNN training, whole machine, mixed precision allowed | skipped: not root |" in md
    row = next(line for line in md.splitlines() if line.startswith("| S3 MLP"))
    assert "8 s, 1 trials" in row and "40 s, 1 trials (1 configs)" in row
    assert "| S3 | tune's measuring ≤ 25% of the oracle's | 20% | ✓ |" in md
    plan_vs_defaults = next(line for line in md.splitlines() if "plan ≥ 1.25× TF defaults" in line)
    assert "1.50×" in plan_vs_defaults and plan_vs_defaults.endswith("✓ |")
    assert "| S3 | plan ≥ 0.95× oracle | 0.94×" in md  # 90/96, clearly below: ✗
    assert "`bench/bench_plan.py`: missing" in md
    assert "total runtime 10 min" in md
    assert (tmp_path / "m.png").stat().st_size > 1000
