"""bench/: the report from a journal (table, targets, chart, budgets, load), machine names."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import background
import bench_report
import budgets
import exec_arm
import folklore
import paired
import paired_arms
import tune_bench

from hwtune.models.hardware import CpuInfo, Hardware, Limits, LogicalCpu
from hwtune.tune.stats import Comparison


def config(intra: int | None, jit: bool | None = None) -> str:
    return json.dumps(
        {
            "intra_op": intra,
            "inter_op": None,
            "onednn": None,
            "jit": jit,
            "precision": None,
            "instances": 1,
            "cpus": [],
            "extra_env": {},
        },
        sort_keys=True,
    )


def load(other_cpu_s: float, wall_s: float = 10.0) -> dict[str, object]:
    return {"wall_s": wall_s, "cpus": 2, "other_cpu_s": other_cpu_s, "steal_cpu_s": 0.0}


BUDGETS: list[dict[str, object]] = [
    {
        "id": "budget/bench_detect.py",
        "phase": "budget",
        "script": "bench_detect.py",
        "status": 0,
        "wall_s": 23.0,
        "output": "",
        "result": {
            "rounds": 15,
            "budget_ms": 150.0,
            "min_ratio": 8.0,
            "pass": True,
            "results": {
                "hwtune detect --json": {"median_ms": 108.9, "ratio_vs_py_cpuinfo": 11.0},
                "py-cpuinfo": {"median_ms": 1195.1},
            },
        },
    },
    {
        "id": "budget/bench_configure.py",
        "phase": "budget",
        "script": "bench_configure.py",
        "status": 2,
        "wall_s": 0.3,
        "result": None,
        "output": "bench_configure: 'import hwtune' exited 0: RuntimeWarning\n",
    },
    {
        "id": "budget/bench_plan.py",
        "phase": "budget",
        "script": "bench_plan.py",
        "status": "missing",
    },
    {
        "id": "budget/bench_daemon.py",
        "phase": "budget",
        "script": "bench_daemon.py",
        "status": 0,
        "wall_s": 97.0,
        "output": "",
        "result": {
            "idle": {"percent_of_one_core": 0.0333, "wall_s": 60.0},
            "follow_inotify": {"max_intervals": 0.58},
            "follow_poll_only": {"max_intervals": 1.23},
            "stop": {"max_s": 0.164},
            "within_budget": True,
            "budgets": {"idle_percent": 0.5, "follow_intervals": 2.0, "stop_s": 1.0},
        },
    },
]


def journal(
    tmp_path: Path,
    tune2: str | None = None,
    tune2_value: float = 95.0,
    noise: float = 0.01,
    busy: float = 0.0,
) -> Path:
    """S3 measured, S1 skipped. `tune2`: the second tuner run's pick (default: the first's),
    `tune2_value` its throughput; `noise`: the relative noise of each final trial; `busy`:
    CPU-seconds other work took during each final trial of 10 s on 2 CPUs."""
    defaults, plan, best = config(None), config(1), config(1, jit=False)
    tune2 = tune2 or best
    entries: list[dict[str, object]] = [
        {
            "id": "header",
            "settings": {
                "quick": False,
                "oracle_rounds": 1,
                "final_rounds": 3,
                "seconds": 2.0,
                "tune_runs": 2,
            },
            "started": 0,
        },
        {
            "id": "session/1",
            "phase": "session",
            "commit": "abc1234+dirty",
            "hwtune": "0.1.0",
            "python": "3.11.7",
            "cpus": 2,
            "loadavg": [0.05, 0.1, 0.2],
        },
        {
            "id": "S3/space",
            "scenario": "S3",
            "phase": "space",
            "plan_s": 0.3,
            "model": "dense",
            "grid": [json.loads(best)],
        },
        {
            "id": "S3/oracle/0",
            "scenario": "S3",
            "phase": "oracle",
            "round": 0,
            "config": best,
            "value": 100.0,
            "wall_s": 40.0,
            "failure": None,
            "load": load(0.0, 40.0),
        },
        {
            "id": "S3/tune/1",
            "scenario": "S3",
            "phase": "tune",
            "run": 1,
            "seed": 0,
            "measuring_s": 8.0,
            "trials": 1,
        },
        {
            "id": "S3/tune/2",
            "scenario": "S3",
            "phase": "tune",
            "run": 2,
            "seed": 1,
            "measuring_s": 9.0,
            "trials": 2,
        },
        {
            "id": "S3/columns/1",
            "scenario": "S3",
            "phase": "columns",
            "columns": {
                "defaults": defaults,
                "plan": plan,
                "tune": best,
                "tune2": tune2,
                "oracle": best,
            },
            "labels": {"defaults": "d", "plan": "p", "tune": "t", "tune2": "t2", "oracle": "o"},
        },
        {"id": "S1/skipped/1", "scenario": "S1", "phase": "skipped", "reason": "not root"},
        *BUDGETS,
        {"id": "runtime/1", "phase": "runtime", "wall_s": 600.0},
    ]
    # Round levels drift 2× while plan stays 1.5× defaults and the best 1.6×.
    levels = {defaults: 60.0, plan: 90.0, best: 96.0}
    levels.setdefault(tune2, tune2_value)
    for round_, level in enumerate((1.0, 0.5, 1.0)):
        for key, value in levels.items():
            jitter = 1 + noise * ((round_ + len(key) + (key == tune2)) % 3 - 1)
            entries.append(
                {
                    "id": f"S3/final/{round_}/{key}",
                    "scenario": "S3",
                    "phase": "final",
                    "round": round_,
                    "config": key,
                    "value": value * level * jitter,
                    "wall_s": 10.0,
                    "failure": None,
                    "load": load(busy),
                }
            )
    path = tmp_path / "m.journal.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def render(tmp_path: Path, **kwargs: Any) -> str:
    return bench_report.write(journal(tmp_path, **kwargs), tmp_path, "m").read_text()


@pytest.fixture
def no_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report as it is without matplotlib: no PNG to make (and no wait for one)."""
    monkeypatch.setattr(bench_report, "chart", lambda results, path: False)


def test_report_has_the_table_targets_and_reasons(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    md = render(tmp_path)
    assert "| S1 CNN training, whole machine, mixed precision allowed | skipped: not root |" in md
    row = next(line for line in md.splitlines() if line.startswith("| S3 MLP"))
    assert "8 s, 1 trials; 9 s, 2 trials" in row and "40 s, 1 trials (1 configs)" in row
    # 8 and 9 s of measuring over a 40-s oracle of one pass, scaled to a full run's three
    shares = "(each run); its 1-pass time × 3/1 | 7%, 8% | ✓ |"
    assert f"| S3 | tune's measuring ≤ 25% of the oracle's {shares}" in md
    plan_vs_defaults = next(x for x in md.splitlines() if "| plan ≥ 1.25× TF defaults |" in x)
    assert "1.50×" in plan_vs_defaults and plan_vs_defaults.endswith("✓ |")
    assert "| S3 | plan ≥ 0.95× oracle | 0.94×" in md  # 90/96, clearly below: ✗
    assert "| `bench/bench_plan.py` | | missing | | — |" in md
    assert "total runtime 10 min" in md
    assert (tmp_path / "m.png").stat().st_size > 1000


@pytest.mark.usefixtures("no_chart")
def test_report_without_matplotlib_says_why_there_is_no_chart(tmp_path: Path) -> None:
    md = render(tmp_path)
    assert "No chart: matplotlib is missing" in md and "![" not in md


@pytest.mark.usefixtures("no_chart")
def test_report_shows_both_tuner_runs_and_the_reproducibility_target(tmp_path: Path) -> None:
    md = render(tmp_path)
    assert "| tune | tune (2nd run) | oracle (grid's best) |" in md
    assert "| S3 | two tuner runs within 3% (2nd / 1st) | 1.00× (same settings) | ✓ |" in md
    assert "| S3 | tune (2nd run) ≥ 1.25× TF defaults |" in md
    assert "  - tune (2nd run): `t2` (seed 1)" in md

    def verdict(**kwargs: Any) -> str:
        md = render(tmp_path, tune2=config(2), **kwargs)
        return next(x for x in md.splitlines() if "two tuner runs within 3%" in x)

    # Another pick as fast as the first, 1% noise: the interval lies within ±3%.
    assert verdict(tune2_value=96.0).endswith("| ✓ |")
    # The same with 5% noise: three rounds cannot tell.
    assert verdict(noise=0.05).endswith("| ~ (within noise) |")
    # 88 vs 96: the second pick is clearly slower.
    assert verdict(tune2_value=88.0).endswith("| ✗ |")


@pytest.mark.usefixtures("no_chart")
def test_report_header_names_the_commit_the_model_and_the_load(tmp_path: Path) -> None:
    md = render(tmp_path)
    assert "hwtune 0.1.0 at commit `abc1234+dirty`, Python 3.11.7" in md
    assert "- **S3** planned with `--model dense` (plan:" in md
    assert "Background load: other work used 0.0% of the CPUs" in md and "Quiet" in md
    assert "1-minute load average at start: 0.05 on 2 CPUs" in md
    assert "not quiet" not in md
    md = render(tmp_path, busy=2.0)  # 2 of 20 CPU-seconds per final trial: 10%
    assert "**Warning: the machine was not quiet.**" in md
    assert "other work used 6.9% of the CPUs" in md  # 9 trials × 2 s / (9 × 20 + 80) s
    assert "9 of 10 trials saw more than 3% (worst 10%)" in md


def test_a_scenario_measured_again_on_newer_code_is_named_with_its_commit() -> None:
    entries = [
        {"id": "session/1", "phase": "session", "commit": "aaa1111", "hwtune": "0.1.0"},
        {"id": "S1/final/0/x", "scenario": "S1", "phase": "final"},
        {"id": "S7/final/0/x", "scenario": "S7", "phase": "final"},
        {"id": "session/2", "phase": "session", "commit": "bbb2222", "hwtune": "0.1.0"},
        {"id": "S1/final/1/x", "scenario": "S1", "phase": "final"},
        {"id": "session/3", "phase": "session", "commit": "ccc3333", "hwtune": "0.1.0"},
        {"id": "S7/space", "scenario": "S7", "phase": "space"},
    ]
    text = bench_report.provenance(entries)
    assert "at commit `aaa1111 then bbb2222 then ccc3333 (resumed)`" in text
    assert "(by scenario: S1 at `aaa1111 then bbb2222`; S7 at `aaa1111 then ccc3333`)" in text
    # One commit for every scenario: nothing added.
    assert "by scenario" not in bench_report.provenance(entries[:3])
    # Extended to 24 rounds, then S7 measured again: its rounds all came in the later session.
    extend = {"id": "extend/1", "phase": "extend", "final_rounds": 24}
    again = {"id": "S7/final/9/x", "scenario": "S7", "phase": "final"}
    text = bench_report.final_rounds_text([*entries[:2], extend, again], {"final_rounds": 12})
    assert text.endswith("own arms; S7: all 24 rounds, its grid and tuner in one later session)")
    text = bench_report.final_rounds_text([*entries[:3], extend, again], {"final_rounds": 12})
    assert text.endswith("each round pairs its own arms)")  # S7 had rounds before it too


@pytest.mark.usefixtures("no_chart")
def test_report_quotes_the_budgets_figures(tmp_path: Path) -> None:
    md = render(tmp_path)
    detect = next(x for x in md.splitlines() if x.startswith("| `bench/bench_detect.py`"))
    assert "`hwtune detect --json` 109 ms (11.0× faster); py-cpuinfo 1,195 ms" in detect
    assert detect.endswith("| median < 150 ms, ≥ 8× faster | ✓ |")
    daemon = next(x for x in md.splitlines() if x.startswith("| `bench/bench_daemon.py`"))
    assert "idle 0.033% of a core" in daemon and "≤ 0.16 s" in daemon and daemon.endswith("✓ |")
    configure = next(x for x in md.splitlines() if x.startswith("| `bench/bench_configure.py`"))
    assert "failed (exit 2): `bench_configure: 'import hwtune'" in configure
    assert "### bench/bench_configure.py (exit 2, 0 s)" in md


def test_reproducibility_verdicts() -> None:
    judge = bench_report.judge_reproducible
    assert judge(Comparison("same", 1.0, 1.0, 1.0)) == "✓"  # the same settings picked
    assert judge(Comparison("same", 1.01, 0.985, 1.025)) == "✓"  # interval inside ±3%
    assert judge(Comparison("unclear", 1.01, 0.95, 1.07)) == "~ (within noise)"
    assert judge(Comparison("better", 1.08, 1.04, 1.12)) == "✗"
    assert judge(Comparison("worse", 0.9, 0.85, 0.95)) == "✗"
    assert judge(None) == "—"


def test_machine_names_tell_zen3_from_zen4() -> None:
    zen3 = CpuInfo(arch="x86_64", model_name="AMD EPYC", microarch="znver3", hypervisor="KVM")
    assert tune_bench.machine_name(zen3, 2) == "amd-epyc-znver3-2cpu-kvm"
    zen4 = CpuInfo(arch="x86_64", model_name="AMD EPYC", microarch="znver4", hypervisor="KVM")
    assert tune_bench.machine_name(zen4, 2) == "amd-epyc-znver4-2cpu-kvm"
    bare = CpuInfo(arch="aarch64", model_name=None, microarch="neoverse-v1")
    assert tune_bench.machine_name(bare, 64) == "aarch64-neoverse-v1-64cpu"
    unknown = CpuInfo(arch="x86_64", model_name="Intel(R) Xeon(R) CPU @ 2.20GHz")
    assert tune_bench.machine_name(unknown, 4) == "intel-r-xeon-r-cpu-2-20ghz-4cpu"


def test_every_tune_call_states_the_scenarios_model(tmp_path: Path) -> None:
    models = {s.name: s.model for s in tune_bench.SCENARIOS}
    assert models == {
        "S1": "conv",
        "S2": "dense",
        "S3": "dense",
        "S4": "dense",
        "S5": "dense",  # a transformer: MODEL_HELP counts transformers as dense
        "S6": "unknown",  # tf.data only: no model
        "S7": "conv",  # inference with the CNN
        "S8": "unknown",  # a CNN and an MLP at once
    }
    settings = tune_bench.Settings.make(quick=True)
    journal = tune_bench.Journal(tmp_path / "j.jsonl", True, {"settings": settings.as_json()})
    for scenario in tune_bench.SCENARIOS:
        # common_args() is the start of the dry run's and of both tuner runs' command lines.
        args = tune_bench.ScenarioRun(scenario, settings, journal, None).common_args()
        assert args[args.index("--model") + 1] == scenario.model


def test_background_load_is_busy_time_less_our_own(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  100 0 50 1000 0 0 0 7 0 0\ncpu0 1\ncpu1 1\nintr 5\n")
    (proc / "loadavg").write_text("1.50 0.80 0.40 2/100 999\n")
    times = background.read_times(proc)
    assert times is not None and times.steal_s > 0
    assert background.online_cpus(proc) == 2
    assert background.loadavg(proc) == (1.5, 0.8, 0.4)
    assert background.load_warning((1.5, 0.8, 0.4), 2) is not None
    assert background.load_warning((0.3, 0.2, 0.1), 2) is None
    summary = background.summarize(
        [
            {"phase": "final", "load": load(0.4)},  # 2% of 2 CPUs for 10 s
            {"phase": "final", "load": load(-0.1)},  # tick sampling: slightly below our own
            {"phase": "tune", "load": load(0.3, 100.0)},
        ]
    )
    assert summary is not None and summary.trials == 2 and summary.noisy_trials == 0
    assert summary.quiet and summary.other == pytest.approx(0.6 / 240)


@pytest.mark.usefixtures("no_chart")
def test_a_journal_from_before_these_fields_still_renders(tmp_path: Path) -> None:
    old = REPO / "tests" / "data" / "bench" / "znver4-before-provenance.journal.jsonl"
    copy = tmp_path / "old.journal.jsonl"
    copy.write_text(old.read_text())
    md = bench_report.write(copy, tmp_path, "old").read_text()
    assert "hwtune commit, version and Python not recorded" in md
    assert "Background load: not recorded in this journal." in md
    assert "| not run |" in md and "two tuner runs" not in md
    assert "| S1 | tune ≥ 1.4× TF defaults (bf16 allowed) | 1.65× [1.43–1.90] | ✓ |" in md
    assert "Not run in this journal (`--no-budgets`)." in md


def test_budget_output_from_before_json_is_quoted() -> None:
    lines = budgets.report_lines(
        [
            {
                "phase": "budget",
                "script": "bench_plan.py",
                "status": 0,
                "output": "plan() on {...}\n  1 instance median 1.2 ms\n",
            }
        ]
    )
    assert "| `bench/bench_plan.py` | | exit 0, output below | | ✓ |" in lines
    assert "  1 instance median 1.2 ms" in "\n".join(lines)


def test_a_crashed_budget_script_is_quoted_from_the_repository_root(tmp_path: Path) -> None:
    # The report is committed: a traceback must not carry the path of the checkout it ran in.
    script = tmp_path / "bench" / "bench_boom.py"
    script.parent.mkdir()
    script.write_text("raise RuntimeError('boom')\n")
    entry = budgets.measure(script, quick=False)
    assert entry["status"] == 1 and entry["result"] is None
    assert 'File "bench/bench_boom.py", line 1' in entry["output"]
    assert str(tmp_path) not in entry["output"]


def test_a_resumed_run_measures_again_only_the_budget_scripts_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tune_bench.Journal(tmp_path / "j.jsonl", True, {"machine": "m"})
    for script in budgets.SCRIPTS:
        failed = script == "bench_doctor.py"
        journal.add(
            f"budget/{script}",
            {"phase": "budget", "status": 1 if failed else 0, "result": None if failed else {}},
        )
    measured: list[str] = []

    def measure(path: Path, quick: bool) -> dict[str, Any]:
        measured.append(path.name)
        return {"status": 0, "result": {"pass": True}}

    monkeypatch.setattr(budgets, "measure", measure)
    tune_bench.run_budget_scripts(journal, quick=False)
    assert measured == ["bench_doctor.py"]
    assert journal.get("budget/bench_doctor.py") == {
        "id": "budget/bench_doctor.py",
        "phase": "budget",
        "script": "bench_doctor.py",
        "status": 0,
        "result": {"pass": True},
    }


@pytest.mark.usefixtures("no_chart")
def test_a_resumed_run_adds_the_time_of_every_session(tmp_path: Path) -> None:
    # A session's runtime entry is rewritten after each step (the last value counts); an
    # interrupted session leaves the value of its last finished step.
    path = journal(tmp_path)
    with path.open("a") as handle:
        for entry_id, wall_s in (("runtime/1", 1200.0), ("runtime/2", 660.0)):
            handle.write(json.dumps({"id": entry_id, "phase": "runtime", "wall_s": wall_s}) + "\n")
    md = bench_report.write(path, tmp_path, "m").read_text()
    assert "total runtime 31 min" in md  # 1200 s + 660 s, not 600 + 1200 + 660


# -- issue 17: paired ratios, intervals, targets, the folklore, a real smoke run -------------


def test_paired_ratios_cancel_the_rounds_level() -> None:
    # The machine's level swings 2× between rounds; A is exactly twice B in every round.
    rounds = {0: {"a": 100.0, "b": 50.0}, 1: {"a": 60.0, "b": 30.0}, 2: {"a": 90.0, "b": 45.0}}
    assert paired.ratios(rounds, "a", "b") == [2.0, 2.0, 2.0]
    result = paired.paired(rounds, "a", "b")
    assert result.n == 3 and result.ratio == pytest.approx(2.0)
    assert result.low == pytest.approx(2.0) and result.high == pytest.approx(2.0)
    # A round where one arm failed pairs nothing; the same arm against itself is exactly 1.
    rounds[3] = {"a": 80.0}
    assert paired.paired(rounds, "a", "b").n == 3
    assert paired.paired(rounds, "a", "a") == paired.Paired(4, 1.0, 1.0, 1.0)
    assert paired.rounds_of(
        [
            {"phase": "final", "round": 0, "config": "a", "value": 5.0},
            {"phase": "final", "round": 0, "config": "b", "value": None},  # failed
            {"phase": "oracle", "round": 0, "config": "c", "value": 7.0},  # not final
        ]
    ) == {0: {"a": 5.0}}


def test_interval_is_a_t_interval_over_log_ratios() -> None:
    values = [1.0, 1.1, 1.2]
    logs = [math.log(v) for v in values]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    half = 4.303 * sd / math.sqrt(3)  # t(0.975, df=2), any statistics table
    result = paired.interval(values)
    assert result.ratio == pytest.approx(math.exp(mean))
    assert result.low == pytest.approx(math.exp(mean - half))
    assert result.high == pytest.approx(math.exp(mean + half))
    one = paired.interval([1.3])
    assert one.n == 1 and one.high == math.inf and "no interval" in one.show()
    assert paired.interval([]).n == 0


def test_a_target_is_met_only_when_the_interval_clears_it() -> None:
    judge = paired.judge
    assert judge(paired.Paired(8, 1.30, 1.26, 1.34), 1.25) == "met"
    assert judge(paired.Paired(8, 1.30, 1.20, 1.41), 1.25) == "unclear"  # point above, not all
    assert judge(paired.Paired(8, 1.10, 1.05, 1.15), 1.25) == "missed"
    assert judge(paired.Paired(1, 1.50, 0.0, math.inf), 1.25) == "unclear"
    assert judge(paired.Paired(0, math.nan, 0.0, math.inf), 1.0) == "no data"


def issue17_journal(tmp_path: Path, tune_over_plan: float, oracle: float = 96.0) -> Path:
    """S4 (two jobs: a cut budget) with every peer over 4 drifting rounds: defaults 60,
    folklore 80, plan 90, tune `90 × tune_over_plan`, oracle 96; 1% alternating noise."""
    keys = {
        "defaults": config(None),
        "folklore": config(2),
        "plan": config(1),
        "tune": config(1, jit=True),
        "oracle": config(1, jit=False),
    }
    levels = {"defaults": 60.0, "folklore": 80.0, "plan": 90.0, "oracle": oracle}
    levels["tune"] = 90.0 * tune_over_plan
    entries: list[dict[str, object]] = [
        {"id": "header", "settings": {"quick": False, "final_rounds": 4}, "started": 0},
        {"id": "S4/space", "scenario": "S4", "phase": "space", "model": "dense"},
        {
            "id": "S4/tune/1",
            "scenario": "S4",
            "phase": "tune",
            "run": 1,
            "measuring_s": 9.0,
            "trials": 3,
        },
        {
            "id": "S4/columns/1",
            "scenario": "S4",
            "phase": "columns",
            "columns": keys,
            "labels": {name: name for name in keys},
        },
        {"id": "session/1", "phase": "session", "cpus": 2, "bf16_flags": [], "gpus": 0},
    ]
    for round_, level in enumerate((1.0, 0.6, 1.3, 0.8)):
        for name, key in keys.items():
            entries.append(
                {
                    "id": f"S4/final/{round_}/{key}",
                    "scenario": "S4",
                    "phase": "final",
                    "round": round_,
                    "config": key,
                    "value": levels[name] * level * (1.01 if (round_ + len(name)) % 2 else 0.99),
                    "wall_s": 10.0,
                    "failure": None,
                }
            )
    path = tmp_path / "i17.journal.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


@pytest.mark.usefixtures("no_chart")
def test_targets_table_judges_every_peer_by_its_paired_interval(tmp_path: Path) -> None:
    md = bench_report.write(issue17_journal(tmp_path, 1.0), tmp_path, "i17").read_text()
    rows = {
        line.split(" | ")[1]: line
        for line in md.splitlines()
        if line.startswith("| S4 | ") or line.startswith("| all | ")
    }
    assert rows["plan ≥ folklore"].endswith("| ✓ met |")  # 90 / 80 = 1.125
    assert "1.12×" in rows["plan ≥ folklore"] and "(n=4)" in rows["plan ≥ folklore"]
    assert rows["plan ≥ 1.25× TF defaults (budget cut)"].endswith("| ✓ met |")  # 1.5
    assert rows["plan ≥ 0.95× grid's best"].endswith("| ✗ missed |")  # 0.9375
    assert rows["tune ≥ 0.97× TF defaults"].endswith("| ✓ met |")
    # The tuner matched the plan and the grid's best is within 10% of it (1.07×, interval
    # below 1.1): explained, with the grid's headroom over the plan quoted.
    earns = rows["tuner ≥ 1.1× plan somewhere"]
    assert "✓ explained: the plan is at the grid's best everywhere" in earns
    assert "grid's best over the plan, paired: S4 1.07×" in earns
    assert "**not run: no bf16 CPU**" in md and "**not run: no GPU**" in md
    # The paired table's last column: how far the grid's best got over TF defaults (96 / 60).
    lines = md.splitlines()
    head = next(x for x in lines if x.startswith("| scenario | plan / TF defaults"))
    assert head.endswith("| oracle (grid's best) / TF defaults |")
    paired_s4 = lines[lines.index(head) + 2]
    assert paired_s4.startswith("| S4 | ") and paired_s4.split(" | ")[-1].startswith("1.60×")
    # The same journal, the tuner 20% above the plan: met.
    md = bench_report.write(issue17_journal(tmp_path, 1.2), tmp_path, "i17").read_text()
    earns = next(x for x in md.splitlines() if "tuner ≥ 1.1× plan somewhere" in x)
    assert earns.endswith("| ✓ met |") and "S4 tune 1.20×" in earns
    # A grid 20% above the plan that the tuner did not find: missed, not explained.
    md = bench_report.write(issue17_journal(tmp_path, 1.0, 108.0), tmp_path, "i17").read_text()
    earns = next(x for x in md.splitlines() if "tuner ≥ 1.1× plan somewhere" in x)
    assert "✗ missed" in earns and "explained" not in earns and "S4 1.20×" in earns


def test_folklore_is_the_guides_recipe() -> None:
    cpu = CpuInfo(
        arch="x86_64",
        sockets=2,
        physical_cores=8,
        logical_cpus=16,
        online_cpus=tuple(range(16)),
        topology=tuple(
            LogicalCpu(c, socket=(c % 8) // 4, core=c % 8, node=(c % 8) // 4) for c in range(16)
        ),
    )
    hw = Hardware(cpu=cpu, limits=Limits(usable_cpus=tuple(range(16)), effective_cpus=16))
    one = folklore.recipe(hw, 1)
    assert (one.intra, one.inter, one.cpus) == (8, 2, ())  # physical cores, sockets
    assert dict(one.extra_env) == {
        "OMP_NUM_THREADS": "8",
        "KMP_BLOCKTIME": "1",
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
    }
    two = folklore.recipe(hw, 2, [(0, 1, 2, 3), (4, 5, 6, 7)])
    assert (two.intra, two.inter, two.instances) == (4, 1, 2)
    assert two.cpus == ((0, 1, 2, 3), (4, 5, 6, 7))  # numactl-style, one group each
    assert dict(two.extra_env)["OMP_NUM_THREADS"] == "4"


@pytest.mark.tf
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_a_real_smoke_run_writes_the_report_with_every_peer(tmp_path: Path) -> None:
    """bench/run --smoke on S2: dry run, defaults, folklore and plan over two rounds of
    0.3 s trials (~40 s on a quiet 2-core VM); the report has the paired ratios and targets."""
    env = {**os.environ, "PYTHON": sys.executable, "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = ["--smoke", "--scenarios", "S2", "--machine", "smoke", "--results-dir", str(tmp_path)]
    proc = subprocess.run(
        [str(REPO / "bench" / "run"), *args, "--fresh"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    journal = bench_report.load(tmp_path / "smoke.journal.jsonl")
    finals = [e for e in journal if e.get("phase") == "final"]
    assert {e["round"] for e in finals} == {0, 1} and all(e["value"] for e in finals)
    columns = next(e for e in journal if e.get("phase") == "columns")["columns"]
    assert set(columns) == {"defaults", "folklore", "plan", "oracle"}
    assert '"KMP_BLOCKTIME": "1"' in columns["folklore"]
    md = (tmp_path / "smoke.md").read_text()
    assert "SMOKE run" in md and "## TARGETS (issue 17)" in md
    assert "| S2 | plan ≥ folklore |" in md and "(n=2)" in md


def test_exec_arm_adds_every_copys_last_metric() -> None:
    output = "\n".join(
        [
            "[0] hwtune-metric: samples_per_sec=10.0",
            "[1] hwtune-metric: samples_per_sec=7.5",
            "[0] hwtune-metric: samples_per_sec=11.0",  # the last value of a copy counts
            "[1] # policy=float32",
            "hwtune-metric: samples_per_sec=99",  # not a copy's line
        ]
    )
    assert exec_arm.summed(output, "samples_per_sec", 2) == 18.5
    assert exec_arm.summed(output, "samples_per_sec", 3) is None  # a copy did not report
    assert exec_arm.summed(output, "work_per_sec", 2) is None


def test_a_full_run_with_fewer_oracle_rounds_says_so_and_keeps_the_tuners_budget() -> None:
    full = {"quick": False, "oracle_rounds": 1}
    assert "1 oracle round (fewer than a default full run's 3" in (
        bench_report.oracle_rounds_text(full)
    )
    assert bench_report.oracle_rounds_text({**full, "oracle_rounds": 3}) == "3 oracle rounds"
    assert bench_report.oracle_rounds_text({"quick": True, "oracle_rounds": 1}) == (
        "1 oracle round"
    )
    settings = tune_bench.Settings(False, 2.0, 1, 6, None)
    run = tune_bench.ScenarioRun.__new__(tune_bench.ScenarioRun)
    run.settings = settings
    run.oracle_time = lambda: 100.0  # type: ignore[method-assign]
    assert run.tuner_share() == pytest.approx(75.0)  # 25% of three 100-s passes
    run.settings = tune_bench.Settings(False, 2.0, 3, 8, None)
    assert run.tuner_share() == pytest.approx(25.0)  # 100 s over three passes: 25% of them


def test_more_final_rounds_extend_a_finished_run_and_the_report_says_so(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    first = tune_bench.Settings(False, 2.0, 1, 6, None).as_json()
    tune_bench.Journal(path, True, {"settings": first}).add("S1/final/0/x", {"value": 1.0})
    more = {**first, "final_rounds": 18}
    resumed = tune_bench.Journal(path, False, {"settings": more})
    assert resumed.get("S1/final/0/x") is not None  # earlier rounds are kept, not re-measured
    assert (
        resumed.get(
            "extend/18",
        )["final_rounds_before"]
        == 6
    )  # type: ignore[index]
    tune_bench.Journal(path, False, {"settings": more})  # resuming the extension again is fine
    assert sum('"phase": "extend"' in line for line in path.read_text().splitlines()) == 1
    for other in (
        {**first, "oracle_rounds": 3},
        {**more, "seconds": 3.0},
        {**first, "final_rounds": 4},
    ):
        with pytest.raises(SystemExit, match="other settings"):
            tune_bench.Journal(path, False, {"settings": other})
    entries = bench_report.load(path)
    assert bench_report.final_rounds_text(entries, first) == (
        "18 final rounds (6 in the first session, rounds 7-18 added in a resumed one: the grid "
        "and the tuner were not measured again, and each round pairs its own arms)"
    )
    assert bench_report.final_rounds_text([], first) == "6 final rounds"


def test_paired_arms_reads_tuner_configurations_and_names_a_bad_one() -> None:
    name, config = paired_arms.parse_arm(
        'on={"intra":1,"onednn":true,"cpus":[[0]],"extra_env":[["ONEDNN_MAX_CPU_ISA","AVX2"]]}'
    )
    assert name == "on" and config.intra == 1 and config.onednn is True
    assert config.cpus == ((0,),) and config.extra_env == (("ONEDNN_MAX_CPU_ISA", "AVX2"),)
    with pytest.raises(SystemExit, match="arm 'bad'"):
        paired_arms.parse_arm('bad={"threads":2}')
    with pytest.raises(SystemExit, match="not NAME=JSON"):
        paired_arms.parse_arm('{"intra":1}')
