"""The tuning benchmark: TF defaults, the folklore recipe, `hwtune plan`, `hwtune tune` and
the grid's best, interleaved, on the workloads the rules came from and on others.

    bench/run [--quick | --smoke] [--scenarios S1,S3] [--fresh] [--report-only] [--machine NAME]

Scenarios (issues 6 and 17), each with a built-in workload (hwtune/tune/builtin/):
    S1  CNN training, whole machine, mixed precision allowed (one job)
    S2  MLP training, whole machine (one job)
    S3  MLP training inside a real cgroup with a 1-CPU CFS quota (root only; else skipped)
    S4  MLP training, two jobs at once on the node (2 concurrent processes, throughputs added)
    S5  transformer encoder block training, whole machine (attention, layer norm, GELU)
    S6  input-bound tf.data pipeline (decode/augment map), whole machine
    S7  batch inference on a SavedModel; instances searched (1, 2, … copies)
    S8  mixed jobs: a CNN and an MLP trained at once (work = samples × model FLOPs)

Every `hwtune tune` call states the kind of model the scenario trains (`--model`): the
planner's XLA rule depends on it.

For each, in order: the plan's configuration and the space (`hwtune tune --dry-run`, run
inside the scenario's cgroup so it sees the quota); the oracle: every configuration of the
space, R rounds, each round in a new shuffled order; the tuner, twice (`hwtune tune
--no-store --seed 0`, then `--seed 1`, each with the same budget: 25% of the oracle's
measuring time; its trials in the same cgroup), so the report can show whether its decisions
are reproducible; then the final comparison, interleaved: TF defaults, the folklore recipe
(folklore.py), plan, both tuner picks and oracle-best (identical configurations once) once per
round in a shuffled order, N rounds. The report's ratios are paired (paired.py): each arm
against the other in the same round, with a t-interval over the rounds' ratios; the oracle's
pick is re-measured there, so its selection luck does not count.

Modes: the full run (the one the report's targets are judged on); `--quick`, a tiny grid and
one round of everything, to check the whole chain; `--smoke`, the plan and its peers only (no
grid, no tuner), two short rounds, in a minute or two per scenario: the test suite runs it.

Every trial is appended to bench/results/<machine>.journal.jsonl as it finishes, so an
interrupted run continues where it stopped (unless --fresh); the report is written from the
journal by bench_report.py. Each trial's entry also records the CPU time other work took
meanwhile (background.py), and each start of bench/run the hwtune git commit and the load
average. The earlier budgets (bench_detect.py, bench_configure.py, bench_plan.py,
bench_daemon.py) run first, with --json, and are quoted in the report, "missing" if absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import background
import budgets
import folklore
from provenance import (
    check_hwtune,
    default_machine,
    git_commit,
    log,
    machine_name,
    session,
)
from quota import QuotaUnavailable, cpu_quota, joiner
from scenarios import FULL_ORACLE_ROUNDS, SCENARIOS, Scenario, Settings

from hwtune.models.hardware import Hardware
from hwtune.tune.config import TrialConfig, from_json, to_json
from hwtune.tune.trial import TrialRunner
from hwtune.tune.workloads import Workload, builtin

# Re-exported for bench_report.py and the tests.
__all__ = ["SCENARIOS", "Scenario", "Settings", "git_commit", "machine_name"]

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
TUNER_SHARE = 0.25  # issue 6: the tuner may spend ≤ 25% of the oracle's measuring time
# ... of a full run's oracle, FULL_ORACLE_ROUNDS passes of the grid (scenarios.py): a run with
# fewer oracle rounds (--oracle-rounds) gives the tuner the same budget, so its pick does not
# depend on how closely the grid was measured.
# Marks the "hwtune exec" arm's configuration (a variable its wrapper ignores): its journal key
# differs from every configuration of the grid.
EXEC_ARM_ENV = "HWTUNE_BENCH_ARM"
EXEC_LABEL = "hwtune exec --instances {n} -- <workload> (its plan, pinning rule, configure())"


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
            wanted = json.loads(json.dumps(header["settings"]))
            if old is not None and old != wanted:
                if not more_final_rounds(old, wanted):
                    sys.exit(f"{path} was made with other settings ({old}); use --fresh")
                self.extend(old, wanted)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        if "header" not in self.entries:
            self.add("header", header)

    def extend(self, old: dict[str, Any], wanted: dict[str, Any]) -> None:
        """Record that this session adds final rounds to the run (once per new count)."""
        entry_id = f"extend/{wanted['final_rounds']}"
        if entry_id not in self.entries:
            log(f"adding final rounds {old['final_rounds'] + 1}-{wanted['final_rounds']}")
            self.add(
                entry_id,
                {
                    "phase": "extend",
                    "final_rounds_before": old["final_rounds"],
                    "final_rounds": wanted["final_rounds"],
                    "started": time.time(),
                },
            )

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


def more_final_rounds(old: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether `wanted` only asks for more final rounds than the journal's run had: rounds
    added to a finished run keep every earlier measurement valid (each round pairs its own
    arms, and the grid and the tuner are not measured again), so the run is extended."""
    rest = {k: v for k, v in old.items() if k != "final_rounds"}
    return (
        rest == {k: v for k, v in wanted.items() if k != "final_rounds"}
        and isinstance(old.get("final_rounds"), int)
        and isinstance(wanted.get("final_rounds"), int)
        and wanted["final_rounds"] > old["final_rounds"]
    )


def hwtune_json(
    args: list[str], procs: Path | None, environ: dict[str, str], timeout: float
) -> tuple[dict[str, Any] | None, str, float]:
    """Run `python -m hwtune ARGS --json` (inside the cgroup); (parsed output, stderr, s)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hwtune", *args, "--json"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        preexec_fn=joiner(procs),
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        return None, proc.stderr[-3000:], elapsed
    return json.loads(proc.stdout), proc.stderr[-3000:], elapsed


class ScenarioRun:
    def __init__(
        self,
        scenario: Scenario,
        settings: Settings,
        journal: Journal,
        procs: Path | None,
        hardware: Hardware | None = None,
    ) -> None:
        self.hw = hardware
        self.s = scenario
        self.settings = settings
        self.journal = journal
        self.procs = procs
        self.environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        self.runner = TrialRunner(
            builtin(scenario.workload, seconds=settings.seconds),
            environ=self.environ,
            timeout_s=600,
            cgroup_procs=procs,
        )
        self.rng = random.Random(f"{scenario.name}-{settings.quick}")
        # Several jobs: also `hwtune exec --instances N` itself, as a user starts them
        # (exec_arm.py): its plan, environment and pinning rule, configure() in each copy.
        self.exec_config: TrialConfig | None = None
        self.exec_runner: TrialRunner | None = None
        count = scenario.instances or 1
        if count > 1:
            job = builtin(scenario.workload, seconds=settings.seconds)
            argv = (
                sys.executable,
                str(BENCH / "exec_arm.py"),
                str(count),
                scenario.model,
                job.metric or "samples_per_sec",
                "--",
                *job.argv,
            )
            self.exec_config = TrialConfig(extra_env=((EXEC_ARM_ENV, "exec"),))
            self.exec_runner = TrialRunner(
                Workload(key="bench:exec", argv=argv, display="hwtune exec", metric=job.metric),
                environ=self.environ,
                timeout_s=600,
                cgroup_procs=procs,
            )

    def common_args(self) -> list[str]:
        args = [
            "--workload",
            f"builtin:{self.s.workload}",
            "--seconds",
            f"{self.settings.seconds:g}",
            "--model",
            self.s.model,
        ]
        if self.s.allow_precision:
            args.append("--allow-precision")
        if self.s.instances:
            args += ["--instances", str(self.s.instances)]
        if self.s.mode != "throughput":
            args += ["--mode", self.s.mode]
        return args

    def trial(self, entry_id: str, phase: str, config: TrialConfig, round_: int) -> None:
        if self.journal.get(entry_id):
            return
        meter = background.Meter()
        runner = self.exec_runner if config == self.exec_config else self.runner
        assert runner is not None
        result = runner.run(config)
        self.journal.add(
            entry_id,
            {
                "scenario": self.s.name,
                "phase": phase,
                "round": round_,
                "config": key_of(config),
                "label": config.label(),
                "value": result.value,
                "wall_s": round(result.wall_s, 3),
                "failure": result.failure,
                "stderr_tail": result.stderr_tail if result.failure else "",
                "load": meter.stop(),
            },
        )
        shown = f"{result.value:,.0f}/s" if result.ok else f"FAILED {result.failure}"
        label = "hwtune exec" if config == self.exec_config else config.label()
        log(f"{self.s.name} {phase} r{round_} {label:48} {shown} ({result.wall_s:.1f} s)")

    def space(self) -> dict[str, Any]:
        entry_id = f"{self.s.name}/space"
        found = self.journal.get(entry_id)
        if found:
            return found
        args = ["tune", "--dry-run", *self.common_args()]
        data, err, elapsed = hwtune_json(args, self.procs, self.environ, 300)
        if data is None:
            raise RuntimeError(f"hwtune {' '.join(args)} failed:\n{err}")
        return self.journal.add(
            entry_id,
            {
                "scenario": self.s.name,
                "phase": "space",
                "model": self.s.model,
                "args": args,
                "plan_s": round(elapsed, 3),
                **data,
            },
        )

    def oracle(self, grid: list[TrialConfig], start: TrialConfig) -> None:
        if self.settings.oracle_limit is not None:
            others = [c for c in grid if c != start]
            grid = [
                start,
                *random.Random(0).sample(others, min(len(others), self.settings.oracle_limit - 1)),
            ]
        for round_ in range(self.settings.oracle_rounds):
            order = list(grid)
            self.rng.shuffle(order)
            for config in order:
                self.trial(
                    f"{self.s.name}/oracle/{round_}/{key_of(config)}", "oracle", config, round_
                )

    def tuner_share(self) -> float:
        rounds = max(1, self.settings.oracle_rounds)
        return TUNER_SHARE * self.oracle_time() * FULL_ORACLE_ROUNDS / rounds

    def first_race_s(self) -> float:
        """A floor for the tuner's budget: one round of its first race (the plan and its
        neighbours) and one trial of the second, at the oracle's median trial time. Below
        that the tuner cannot compare anything and fails; above 25% of the oracle, the report
        shows the excess."""
        walls = sorted(e["wall_s"] for e in self.entries("oracle"))
        arms = 1 + len(self.space()["neighbors"])
        return (arms + 1) * (walls[len(walls) // 2] if walls else 10.0)

    def oracle_time(self) -> float:
        return float(sum(e["wall_s"] for e in self.entries("oracle")))

    def entries(self, phase: str) -> Iterator[dict[str, Any]]:
        return (
            e
            for e in self.journal.entries.values()
            if e.get("scenario") == self.s.name and e.get("phase") == phase
        )

    def oracle_best(self, start: TrialConfig) -> TrialConfig:
        """The grid's best by a blocked fit of the oracle rounds; `start` (the plan) when
        there are none (a smoke run)."""
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
        measured = [k for k in effect if k not in failed]
        if not measured:
            return start
        return configs[str(max(measured, key=lambda k: effect[k]))]

    def tune(self, run: int) -> dict[str, Any]:
        """`hwtune tune` run `run` (1, 2, …) with seed run - 1 and the same budget rule."""
        entry_id = f"{self.s.name}/tune/{run}"
        found = self.journal.get(entry_id)
        if found:
            return found
        # Quick: enough for two rounds of the first race (the tuner compares nothing before
        # its second round); 90 s alone failed S4's quick run once the `pinned` dimension
        # made six arms of ~15-22 s on the loaded 2-core VM.
        budget = (
            max(90.0, 2 * self.first_race_s())
            if self.settings.quick
            else max(self.first_race_s(), self.tuner_share())
        )
        seed = run - 1
        args = [
            "tune",
            *self.common_args(),
            "--budget",
            f"{budget:.0f}",
            "--no-store",
            "--seed",
            str(seed),
        ]
        if self.settings.quick:
            args += ["--max-repeats", "2"]
        log(f"{self.s.name} tune #{run}: hwtune {' '.join(args)}")
        meter = background.Meter()
        with tempfile.TemporaryDirectory(prefix="hwtune-bench-tuned-") as store:
            environ = {**self.environ, "HWTUNE_TUNED_DIR": store}
            data, err, elapsed = hwtune_json(args, self.procs, environ, budget * 3 + 600)
        entry: dict[str, Any] = {
            "scenario": self.s.name,
            "phase": "tune",
            "run": run,
            "seed": seed,
            "args": args,
            "budget_s": budget,
            "wall_s": round(elapsed, 2),
            "load": meter.stop(),
        }
        if data is None:
            entry["failure"] = err
        else:
            entry.update(
                best=data["best"],
                trials=data["trials"],
                measuring_s=data["measuring_s"],
                elapsed_s=data["elapsed_s"],
                ratio=data["ratio"],
                stopped=data["stopped"],
                failures=len(data["failures"]),
            )
        log(f"{self.s.name} tune #{run}: {entry.get('best') or entry.get('failure')}")
        return self.journal.add(entry_id, entry)

    def label(self, column: str, config: TrialConfig) -> str:
        """How the report names a column's settings (the folklore's variables spelt out)."""
        if column == "exec":
            return EXEC_LABEL.format(n=self.s.instances)
        if column == "folklore":
            return " ".join([config.label(), *(f"{k}={v}" for k, v in config.extra_env)])
        return config.label()

    def folklore(self) -> TrialConfig:
        """The recipe users copy (folklore.py), for this scenario's job count; several copies
        are pinned numactl-style to the planner's slices."""
        from hwtune.planner.instances import split
        from hwtune.probes import detect

        hw = self.hw or detect(gpus=False, tensorflow=False)
        count = self.s.instances or 1
        slices = [s.cpus for s in split(hw, count, ())] if count > 1 else []
        return folklore.recipe(hw, count, slices)

    def final(self, columns: dict[str, TrialConfig]) -> None:
        unique = list(dict.fromkeys(columns.values()))
        for round_ in range(self.settings.final_rounds):
            order = list(unique)
            self.rng.shuffle(order)
            for config in order:
                self.trial(
                    f"{self.s.name}/final/{round_}/{key_of(config)}", "final", config, round_
                )

    def run(self) -> None:
        space = self.space()
        start = from_json(space["start"])
        grid = [from_json(c) for c in space["grid"]]
        log(f"{self.s.name}: plan {start.label()}; grid of {len(grid)}")
        self.oracle(grid, start)
        defaults = TrialConfig(instances=self.s.instances or 1)
        columns = {
            "defaults": defaults,
            "folklore": self.folklore(),
            "plan": start,
            "oracle": self.oracle_best(start),
        }
        if self.exec_config is not None:
            columns["exec"] = self.exec_config
        for run in range(1, self.settings.tune_runs + 1):
            tuned = self.tune(run)
            if "best" in tuned:
                columns[tune_column(run)] = from_json(tuned["best"])
        self.journal.add(
            f"{self.s.name}/columns/{time.time()}",
            {
                "scenario": self.s.name,
                "phase": "columns",
                "columns": {name: key_of(c) for name, c in columns.items()},
                "labels": {name: self.label(name, c) for name, c in columns.items()},
            },
        )
        self.final(columns)


def tune_column(run: int) -> str:
    """The report's column of tuner run `run`: "tune", "tune2", …"""
    return "tune" if run == 1 else f"tune{run}"


def run_budget_scripts(journal: Journal, quick: bool) -> None:
    for script in budgets.SCRIPTS:
        entry_id = f"budget/{script}"
        done = journal.get(entry_id)
        if done and done.get("result") is not None:
            continue  # measured; a script that crashed or failed is run again on resume
        log(f"budget: {script}")
        entry = journal.add(
            entry_id,
            {"phase": "budget", "script": script, **budgets.measure(BENCH / script, quick)},
        )
        log(f"budget: {script} exit {entry['status']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()) if __doc__ else None
    )
    parser.add_argument("--quick", action="store_true", help="tiny grid, 1 round, with the tuner")
    parser.add_argument(
        "--smoke", action="store_true", help="plan and peers only, 2 short rounds (minutes)"
    )
    parser.add_argument(
        "--scenarios", default=",".join(s.name for s in SCENARIOS), help="default: all"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--machine",
        help="results file name (default: CPU model, microarchitecture, usable CPUs and "
        "hypervisor, as amd-epyc-znver4-2cpu-kvm)",
    )
    parser.add_argument("--fresh", action="store_true", help="discard the journal, start over")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report only")
    parser.add_argument("--no-budgets", action="store_true", help="skip the earlier budgets")
    parser.add_argument(
        "--final-rounds",
        type=int,
        metavar="N",
        help="rounds of the final peer comparison (default: 8 full, 1 quick, 2 smoke); a "
        "quick run with 4 gives paired intervals in about an hour",
    )
    parser.add_argument(
        "--tune-runs", type=int, metavar="N", help="tuner runs per scenario (default 2)"
    )
    parser.add_argument(
        "--oracle-rounds",
        type=int,
        metavar="N",
        help="passes over the whole grid (default: 3 full, 1 quick); the tuner's budget stays "
        "25%% of three passes",
    )
    args = parser.parse_args(argv)
    suffix = "-smoke" if args.smoke else "-quick" if args.quick else ""
    machine = args.machine or default_machine() + suffix
    settings = Settings.make(args.quick, smoke=args.smoke)
    changes = {
        "final_rounds": args.final_rounds,
        "tune_runs": args.tune_runs,
        "oracle_rounds": args.oracle_rounds,
    }
    settings = dataclasses.replace(
        settings, **{k: v for k, v in changes.items() if v is not None and v >= 0}
    )
    if not args.smoke and settings.oracle_rounds < 1:
        sys.exit("bench/run: --oracle-rounds must be at least 1 (the grid's best needs a pass)")
    results: Path = args.results_dir
    journal_path = results / f"{machine}.journal.jsonl"
    import bench_report

    if args.report_only:
        bench_report.write(journal_path, results, machine)
        return 0
    wanted = {name.strip().upper() for name in args.scenarios.split(",")}
    unknown = wanted - {s.name for s in SCENARIOS}
    if unknown:
        sys.exit(f"bench/run: no scenario {', '.join(sorted(unknown))} (S1-S{len(SCENARIOS)})")
    problem = check_hwtune()
    if problem:
        sys.exit(f"bench/run: {problem}")
    header = {"machine": machine, "settings": settings.as_json(), "started": time.time()}
    journal = Journal(journal_path, args.fresh, header)
    from hwtune.probes import detect

    hardware = detect(tensorflow=False)
    journal.add(f"session/{time.time()}", session(machine, hardware))
    started = time.monotonic()
    # One runtime entry per session, rewritten after each step, so a run interrupted and
    # resumed reports the time of every session up to its last finished step.
    runtime_id = f"runtime/{time.time()}"

    def note_runtime() -> None:
        journal.add(
            runtime_id, {"phase": "runtime", "wall_s": round(time.monotonic() - started, 1)}
        )

    if not args.no_budgets and not args.smoke:
        run_budget_scripts(journal, args.quick)
        note_runtime()
    for scenario in SCENARIOS:
        if scenario.name not in wanted:
            continue
        note_runtime()
        if scenario.quota is None:
            ScenarioRun(scenario, settings, journal, None, hardware).run()
            continue
        try:
            with cpu_quota(scenario.quota) as procs:
                ScenarioRun(scenario, settings, journal, procs, hardware).run()
        except QuotaUnavailable as why:
            log(f"{scenario.name} skipped: {why}")
            journal.add(
                f"{scenario.name}/skipped/{time.time()}",
                {"scenario": scenario.name, "phase": "skipped", "reason": str(why)},
            )
    note_runtime()
    path = bench_report.write(journal_path, results, machine)
    log(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
