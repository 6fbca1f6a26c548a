"""The tuning benchmark: TF defaults, `hwtune plan`, `hwtune tune` and the grid's best.

    bench/run [--quick] [--scenarios S1,S3] [--fresh] [--report-only] [--machine NAME]

Scenarios (issue 6), each with a built-in workload:
    S1  CNN training, whole machine, mixed precision allowed (one job)
    S2  MLP training, whole machine (one job)
    S3  MLP training inside a real cgroup with a 1-CPU CFS quota (root only; else skipped)
    S4  MLP training, two jobs at once on the node (2 concurrent processes, throughputs added)

For each, in order: the plan's configuration and the space (`hwtune tune --dry-run`, run
inside the scenario's cgroup so it sees the quota); the oracle: every configuration of the
space, R rounds, each round in a new shuffled order; the tuner (`hwtune tune --no-store`, its
budget 25% of the oracle's measuring time, its trials in the same cgroup); then the final
comparison, interleaved: defaults, plan, tune and oracle-best once per round in a shuffled
order, N rounds. Medians and spreads come from the final rounds only (the oracle's pick is
re-measured there, so its selection luck does not count), and ratios from a per-round
blocked fit (hwtune.tune.stats.Blocked) with 95% intervals.

Every trial is appended to bench/results/<machine>.journal.jsonl as it finishes, so an
interrupted run continues where it stopped (unless --fresh); the report is written from the
journal by bench_report.py. The earlier budgets (bench_detect.py, bench_configure.py,
bench_plan.py, bench_daemon.py) run first and are quoted in the report, "missing" if absent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quota import QuotaUnavailable, cpu_quota, joiner

from hwtune.tune.config import TrialConfig, from_json, to_json
from hwtune.tune.trial import TrialRunner
from hwtune.tune.workloads import builtin

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
BUDGET_SCRIPTS = ("bench_detect.py", "bench_configure.py", "bench_plan.py", "bench_daemon.py")
TUNER_SHARE = 0.25  # issue 6: the tuner may spend ≤ 25% of the oracle's measuring time


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    workload: str
    allow_precision: bool = False
    instances: int | None = None  # concurrent jobs, fixed; None: searched by the tuner
    quota: float | None = None  # CPUs of a CFS quota (S3)


# S1-S3 are one training job (`--instances 1`): summing two independent copies would not be
# the same job. Splitting the node is S4's subject, two jobs that are there anyway.
SCENARIOS = (
    Scenario("S1", "CNN training, whole machine, mixed precision allowed", "cnn", True, 1),
    Scenario("S2", "MLP training, whole machine", "mlp", instances=1),
    Scenario("S3", "MLP training in a 1-CPU quota (cgroup CFS)", "mlp", instances=1, quota=1.0),
    Scenario("S4", "MLP training, two jobs at once on the node", "mlp", instances=2),
)


@dataclass(frozen=True)
class Settings:
    quick: bool
    seconds: float  # measurement window of each built-in trial
    oracle_rounds: int
    final_rounds: int
    oracle_limit: int | None  # quick mode: this many grid configurations only

    @classmethod
    def make(cls, quick: bool) -> Settings:
        if quick:
            return cls(True, 1.0, 1, 1, 4)
        return cls(False, 2.0, 3, 5, None)


def key_of(config: TrialConfig) -> str:
    return json.dumps(to_json(config), sort_keys=True)


class Journal:
    """Append-only JSON lines, fsynced per line: what was measured survives a crash."""

    def __init__(self, path: Path, fresh: bool, header: dict[str, Any]) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        if path.exists() and not fresh:
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                self.entries[entry["id"]] = entry
            old = self.entries.get("header", {}).get("settings")
            if old is not None and old != header["settings"]:
                sys.exit(f"{path} was made with other settings ({old}); use --fresh")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        if "header" not in self.entries:
            self.add("header", header)

    def get(self, entry_id: str) -> dict[str, Any] | None:
        return self.entries.get(entry_id)

    def add(self, entry_id: str, data: dict[str, Any]) -> dict[str, Any]:
        entry = {"id": entry_id, **data}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.entries[entry_id] = entry
        return entry


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def hwtune_json(
    args: list[str], procs: Path | None, environ: dict[str, str], timeout: float
) -> tuple[dict[str, Any] | None, str, float]:
    """Run `python -m hwtune ARGS --json` (inside the cgroup); (parsed output, stderr, s)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hwtune", *args, "--json"],
        capture_output=True, text=True, env=environ, timeout=timeout,
        preexec_fn=joiner(procs),
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        return None, proc.stderr[-3000:], elapsed
    return json.loads(proc.stdout), proc.stderr[-3000:], elapsed


class ScenarioRun:
    def __init__(self, scenario: Scenario, settings: Settings, journal: Journal,
                 procs: Path | None) -> None:
        self.s = scenario
        self.settings = settings
        self.journal = journal
        self.procs = procs
        self.environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.runner = TrialRunner(
            builtin(scenario.workload, seconds=settings.seconds),
            environ=self.environ, timeout_s=600, cgroup_procs=procs,
        )
        self.rng = random.Random(f"{scenario.name}-{settings.quick}")

    def common_args(self) -> list[str]:
        args = [
            "--workload", f"builtin:{self.s.workload}", "--seconds", f"{self.settings.seconds:g}",
        ]
        if self.s.allow_precision:
            args.append("--allow-precision")
        if self.s.instances:
            args += ["--instances", str(self.s.instances)]
        return args

    def trial(self, entry_id: str, phase: str, config: TrialConfig, round_: int) -> None:
        if self.journal.get(entry_id):
            return
        result = self.runner.run(config)
        self.journal.add(entry_id, {
            "scenario": self.s.name, "phase": phase, "round": round_, "config": key_of(config),
            "label": config.label(), "value": result.value, "wall_s": round(result.wall_s, 3),
            "failure": result.failure, "stderr_tail": result.stderr_tail if result.failure else "",
        })
        shown = f"{result.value:,.0f}/s" if result.ok else f"FAILED {result.failure}"
        log(f"{self.s.name} {phase} r{round_} {config.label():48} {shown} ({result.wall_s:.1f} s)")

    def space(self) -> dict[str, Any]:
        entry_id = f"{self.s.name}/space"
        found = self.journal.get(entry_id)
        if found:
            return found
        data, err, elapsed = hwtune_json(
            ["tune", "--dry-run", *self.common_args()], self.procs, self.environ, 300
        )
        if data is None:
            raise RuntimeError(f"hwtune tune --dry-run failed:\n{err}")
        return self.journal.add(entry_id, {"scenario": self.s.name, "phase": "space",
                                           "plan_s": round(elapsed, 3), **data})

    def oracle(self, grid: list[TrialConfig], start: TrialConfig) -> None:
        if self.settings.oracle_limit is not None:
            others = [c for c in grid if c != start]
            grid = [start, *random.Random(0).sample(others, min(len(others),
                                                                self.settings.oracle_limit - 1))]
        for round_ in range(self.settings.oracle_rounds):
            order = list(grid)
            self.rng.shuffle(order)
            for config in order:
                self.trial(f"{self.s.name}/oracle/{round_}/{key_of(config)}", "oracle", config,
                           round_)

    def tuner_share(self) -> float:
        return TUNER_SHARE * self.oracle_time()

    def first_race_s(self) -> float:
        """A floor for the tuner's budget: one and a half rounds of its first race (the plan
        and its neighbours) at the oracle's median trial time. Below that the tuner cannot
        compare anything and fails; above 25% of the oracle, the report shows the excess."""
        walls = sorted(e["wall_s"] for e in self.entries("oracle"))
        arms = 1 + len(self.space()["neighbors"])
        return 1.5 * arms * (walls[len(walls) // 2] if walls else 10.0)

    def oracle_time(self) -> float:
        return float(sum(e["wall_s"] for e in self.entries("oracle")))

    def entries(self, phase: str) -> Iterator[dict[str, Any]]:
        return (e for e in self.journal.entries.values()
                if e.get("scenario") == self.s.name and e.get("phase") == phase)

    def oracle_best(self) -> TrialConfig:
        from hwtune.tune.stats import Blocked

        design = Blocked()
        failed = set()
        configs: dict[str, TrialConfig] = {}
        for entry in self.entries("oracle"):
            configs[entry["config"]] = from_json(json.loads(entry["config"]))
            if entry["value"] is None:
                failed.add(entry["config"])
            else:
                design.add(entry["config"], entry["round"], entry["value"])
        effect, _, _ = design.fit()
        best = max((k for k in effect if k not in failed), key=lambda k: effect[k])
        return configs[str(best)]

    def tune(self) -> dict[str, Any]:
        entry_id = f"{self.s.name}/tune"
        found = self.journal.get(entry_id)
        if found:
            return found
        budget = 90.0 if self.settings.quick else max(self.first_race_s(), self.tuner_share())
        args = ["tune", *self.common_args(), "--budget", f"{budget:.0f}", "--no-store"]
        if self.settings.quick:
            args += ["--max-repeats", "2"]
        log(f"{self.s.name} tune: hwtune {' '.join(args)}")
        with tempfile.TemporaryDirectory(prefix="hwtune-bench-tuned-") as store:
            environ = {**self.environ, "HWTUNE_TUNED_DIR": store}
            data, err, elapsed = hwtune_json(args, self.procs, environ, budget * 3 + 600)
        entry: dict[str, Any] = {"scenario": self.s.name, "phase": "tune",
                                 "budget_s": budget, "wall_s": round(elapsed, 2)}
        if data is None:
            entry["failure"] = err
        else:
            entry.update(best=data["best"], trials=data["trials"],
                         measuring_s=data["measuring_s"], elapsed_s=data["elapsed_s"],
                         ratio=data["ratio"], stopped=data["stopped"],
                         failures=len(data["failures"]))
        log(f"{self.s.name} tune: {entry.get('best') or entry.get('failure')}")
        return self.journal.add(entry_id, entry)

    def final(self, columns: dict[str, TrialConfig]) -> None:
        unique = list(dict.fromkeys(columns.values()))
        for round_ in range(self.settings.final_rounds):
            order = list(unique)
            self.rng.shuffle(order)
            for config in order:
                self.trial(f"{self.s.name}/final/{round_}/{key_of(config)}", "final", config,
                           round_)

    def run(self) -> None:
        space = self.space()
        start = from_json(space["start"])
        grid = [from_json(c) for c in space["grid"]]
        log(f"{self.s.name}: plan {start.label()}; grid of {len(grid)}")
        self.oracle(grid, start)
        tuned = self.tune()
        defaults = TrialConfig(instances=self.s.instances or 1)
        columns = {"defaults": defaults, "plan": start, "oracle": self.oracle_best()}
        if "best" in tuned:
            columns["tune"] = from_json(tuned["best"])
        self.journal.add(f"{self.s.name}/columns/{time.time()}", {
            "scenario": self.s.name, "phase": "columns",
            "columns": {name: key_of(c) for name, c in columns.items()},
            "labels": {name: c.label() for name, c in columns.items()},
        })
        self.final(columns)


def run_budget_scripts(journal: Journal, quick: bool) -> None:
    for script in BUDGET_SCRIPTS:
        entry_id = f"budget/{script}"
        if journal.get(entry_id):
            continue
        path = BENCH / script
        if not path.exists():
            journal.add(entry_id, {"phase": "budget", "script": script, "status": "missing"})
            continue
        argv = [sys.executable, str(path)]
        if quick:
            help_text = subprocess.run([*argv, "--help"], capture_output=True, text=True).stdout
            if "--rounds" in help_text:
                argv += ["--rounds", "3"]
        log(f"budget: {' '.join(argv[1:])}")
        started = time.monotonic()
        status: int | str
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
            status, output = proc.returncode, proc.stdout + proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            status, output = "timeout", ""
        journal.add(entry_id, {"phase": "budget", "script": script, "status": status,
                               "output": output, "wall_s": round(time.monotonic() - started, 1)})


def default_machine() -> str:
    from hwtune.probes import detect

    hw = detect(gpus=False, tensorflow=False)
    model = re.sub(r"[^a-z0-9]+", "-", (hw.cpu.model_name or hw.cpu.arch).lower()).strip("-")
    virt = f"-{hw.cpu.hypervisor.lower()}" if hw.cpu.hypervisor else ""
    return f"{model}-{len(hw.limits.usable_cpus)}cpu{virt}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a few minutes: tiny grid, 1 round")
    parser.add_argument("--scenarios", default="S1,S2,S3,S4")
    parser.add_argument("--machine", help="results file name (default: CPU model and count)")
    parser.add_argument("--fresh", action="store_true", help="discard the journal, start over")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report only")
    parser.add_argument("--no-budgets", action="store_true", help="skip the earlier budgets")
    args = parser.parse_args(argv)
    machine = args.machine or default_machine() + ("-quick" if args.quick else "")
    settings = Settings.make(args.quick)
    journal_path = RESULTS / f"{machine}.journal.jsonl"
    import bench_report

    if args.report_only:
        bench_report.write(journal_path, RESULTS, machine)
        return 0
    header = {"machine": machine, "settings": settings.__dict__, "started": time.time()}
    journal = Journal(journal_path, args.fresh, header)
    started = time.monotonic()
    if not args.no_budgets:
        run_budget_scripts(journal, args.quick)
    wanted = {name.strip().upper() for name in args.scenarios.split(",")}
    for scenario in SCENARIOS:
        if scenario.name not in wanted:
            continue
        if scenario.quota is None:
            ScenarioRun(scenario, settings, journal, None).run()
            continue
        try:
            with cpu_quota(scenario.quota) as procs:
                ScenarioRun(scenario, settings, journal, procs).run()
        except QuotaUnavailable as why:
            log(f"{scenario.name} skipped: {why}")
            journal.add(f"{scenario.name}/skipped/{time.time()}",
                        {"scenario": scenario.name, "phase": "skipped", "reason": str(why)})
    journal.add(f"runtime/{time.time()}", {"phase": "runtime",
                                           "wall_s": round(time.monotonic() - started, 1)})
    path = bench_report.write(journal_path, RESULTS, machine)
    log(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
