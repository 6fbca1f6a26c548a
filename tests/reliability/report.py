"""Run the reliability suite and write docs/RELIABILITY.md from the figures it records.

    python -m tests.reliability.report            # the default run (about a minute)
    python -m tests.reliability.report --long     # the default run, then the long run

Each run is `pytest tests/reliability` in a child process with HWTUNE_RELIABILITY_FIGURES
naming a scratch file (and HWTUNE_RELIABILITY=long for the long run); every test appends its
outcome, duration and figures there as JSON lines (tests/reliability/conftest.py). The page
then lists, per area, what was tried, what came of it and what was never lost. The figures
of A regeneration without --long keeps the page's previous "Long run" section as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "RELIABILITY.md"

AREAS = (
    ("test_fuzz_parsers", "Bad input, fuzzed"),
    ("test_faults", "Faults"),
    ("test_writes", "Writes"),
    ("test_hostile_values", "Hostile values"),
    ("test_hostile_inputs", "Hostile caches and tuned results"),
    ("test_processes", "Processes"),
    ("test_hostile_roots", "Hostile roots and umasks"),
    ("test_known_bugs", "Regressions of fixed bugs"),
)
PARSERS = {
    "test_cpulist": "CPU lists (`0-3,8-11`, `0-7:2/4`)",
    "test_proc_cpuinfo": "`/proc/cpuinfo`, then the whole CPU probe",
    "test_lscpu": "`lscpu` output (text, `-p`, `-J`), then the CPU probe",
    "test_proc_cgroup_and_mountinfo": "`/proc/self/cgroup`, `/proc/self/mountinfo`",
    "test_cgroup_limit_files": "cgroup v1/v2 limit files + `/proc/self/status` (limits probe)",
    "test_meminfo_thp_numa": "`/proc/meminfo`, THP mode, NUMA node files",
    "test_nvidia_smi_xml": "`nvidia-smi -q -x` XML",
    "test_xml_entity_attacks": "XML entity expansion / external entities",
    "test_nvidia_smi_topo": "`nvidia-smi topo -m`, merged into GPUs",
    "test_toml_config": "TOML config, then plan and render",
    "test_override_values": "`--set`, `HWTUNE_*`, flags, then every env format",
    "test_hardware_and_profile_json": "`hardware.json` / `profile.json` (strict load)",
    "test_knowledge_table": "user knowledge tables (JSON)",
    "test_tensorflow_install_files": "TensorFlow METADATA, WHEEL, build_info.py, ELF",
    "test_journal_manifest_and_cache": "apply journal manifests, configure() cache",
    "test_launcher_rank_variables": "launcher rank variables (SLURM_*, LOCAL_RANK…)",
    "test_proc_readers_of_verify_and_tune": "`verify`'s /proc readers, tuner metric lines",
    "test_tuned_result_file": "tuned results (`hwtune tune`'s JSON), then plan and render",
}


# The long run splits the suite in two pytest processes of about equal CPU time, one per
# core: half of the fuzzers; the other half and everything else.
_FIRST_HALF = "cpuinfo or lscpu or cgroup or meminfo or cpulist or topo or toml"
LONG_PARTS = (
    ["tests/reliability/test_fuzz_parsers.py", "-k", _FIRST_HALF],
    ["tests/reliability", "-k", f"not (test_fuzz_parsers and ({_FIRST_HALF}))"],
)


def run_suite(long: bool, figures: Path) -> tuple[int, float, str]:
    """Run the suite (in parallel parts for the long run); (worst exit status, wall s, tail)."""
    env = dict(os.environ, HWTUNE_RELIABILITY_FIGURES=str(figures))
    env.pop("HWTUNE_RELIABILITY", None)
    if long:
        env["HWTUNE_RELIABILITY"] = "long"
    parts = [[*part, "-m", "slow"] for part in LONG_PARTS] if long else [["tests/reliability"]]
    started = time.monotonic()
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", *part, "-q", "-p", "no:cacheprovider", "-rfEsxX"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for part in parts
    ]
    outputs = [child.communicate()[0] for child in children]
    for child, out in zip(children, outputs, strict=True):
        if child.returncode != 0:  # the failures in full, for whoever regenerates the page
            with tempfile.NamedTemporaryFile(
                "w", prefix="hwtune-reliability-", suffix=".log", delete=False
            ) as log:
                log.write(out)
            print("\n".join(out.splitlines()[-40:]), file=sys.stderr)
            print(f"full pytest output: {log.name}", file=sys.stderr)
    tails = [(out.strip().splitlines() or ["(no output)"])[-1] for out in outputs]
    worst = max(child.returncode for child in children)
    return worst, time.monotonic() - started, " + ".join(tails)


def load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Run:
    """One run's records, merged per test."""

    def __init__(self, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        self.meta = meta
        self.results: dict[str, dict[str, Any]] = {}
        self.figures: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"outcomes": Counter(), "notes": {}}
        )
        for record in records:
            if record.get("kind") == "result":
                self.results[record["test"]] = record
            elif record.get("kind") == "figures":
                merged = self.figures[record["test"]]
                merged["outcomes"].update(record["outcomes"])
                merged["notes"].update(record["notes"])

    def tests(self, module: str) -> list[str]:
        return sorted(t for t in self.results if f"/{module}.py::" in t)

    def outcome_counts(self, module: str | None = None) -> Counter[str]:
        return Counter(
            r["outcome"]
            for t, r in self.results.items()
            if module is None or f"/{module}.py::" in t
        )

    def seconds(self, module: str | None = None) -> float:
        return float(
            sum(
                r["seconds"]
                for t, r in self.results.items()
                if module is None or f"/{module}.py::" in t
            )
        )


def short(test: str) -> str:
    return test.split("::", 1)[1]


def fmt_outcomes(outcomes: Counter[str], skip: tuple[str, ...] = ()) -> str:
    parts = [f"{k}: {v:,}" for k, v in sorted(outcomes.items()) if k not in skip]
    return "; ".join(parts) or "–"


def status(result: dict[str, Any] | None) -> str:
    if result is None:
        return "not run"
    mark = {
        "passed": "pass",
        "failed": "**FAIL**",
        "skipped": "skipped",
        "xfailed": "known bug (xfail)",
        "xpassed": "**fixed? (xpass)**",
    }
    text = str(mark.get(result["outcome"], result["outcome"]))
    if result["outcome"] in ("skipped", "failed") and result.get("reason"):
        text += f": {result['reason'][:160]}"
    return text


FINAL = ("inputs", "result", "result with issues")


def parser_table(run: Run) -> list[str]:
    """One row per parser (parametrized cases merged): each input's final outcome, and what
    later stages (plan, render, each env format) made of the ones that parsed."""
    rows = [
        "| Parser | Inputs tried | Clean result | Result + issues | Typed error | "
        "Later stages | Outcome | s |",
        "|---|---:|---:|---:|---|---|---|---:|",
    ]
    groups: dict[str, list[str]] = defaultdict(list)
    for test in run.tests("test_fuzz_parsers"):
        groups[short(test).split("[")[0]].append(test)
    for name, tests in groups.items():
        outcomes: Counter[str] = Counter()
        for test in tests:
            outcomes.update(run.figures[test]["outcomes"])
        errors = {
            k[len("typed error (") : -1]: v
            for k, v in outcomes.items()
            if k.startswith("typed error")
        }
        error_text = ", ".join(f"{k} {v:,}" for k, v in sorted(errors.items())) or "0"
        later = fmt_outcomes(
            Counter(
                {
                    k: v
                    for k, v in outcomes.items()
                    if k not in FINAL and not k.startswith("typed error")
                }
            )
        )
        results = [run.results[t] for t in tests]
        worst = next((r for r in results if r["outcome"] not in ("passed",)), results[0])
        seconds = sum(r["seconds"] for r in results)
        cases = f" ({len(tests)} cases)" if len(tests) > 1 else ""
        rows.append(
            f"| {PARSERS.get(name, name)}{cases} | {outcomes.get('inputs', 0):,} | "
            f"{outcomes.get('result', 0):,} | {outcomes.get('result with issues', 0):,} | "
            f"{error_text} | {later} | {status(worst)} | {seconds:.1f} |"
        )
    return rows


def generic_table(run: Run, module: str) -> list[str]:
    rows = ["| Test | Outcome | Figures | s |", "|---|---|---|---:|"]
    for test in run.tests(module):
        fig = run.figures.get(test, {"outcomes": Counter(), "notes": {}})
        notes = ", ".join(
            f"{k}={v}" for k, v in fig["notes"].items() if not isinstance(v, (list, dict))
        )
        text = fmt_outcomes(fig["outcomes"]) + (f" ({notes})" if notes else "")
        rows.append(
            f"| `{short(test)}` | {status(run.results.get(test))} | {text} | "
            f"{run.results[test]['seconds']:.1f} |"
        )
    return rows


def totals(run: Run) -> dict[str, int]:
    """Headline counts summed over the tests that record them."""
    sums: Counter[str] = Counter()
    for fig in run.figures.values():
        for key, value in fig["outcomes"].items():
            sums[key] += value
    faults = sum(v for k, v in sums.items() if k.startswith("faults injected"))
    intact = sum(
        v for k, v in sums.items() if "intact" in k or k.startswith("files checked: complete")
    )
    return {
        "parser inputs": sums["inputs"],
        "faults injected": faults,
        "kills": sums["killed"] + sums["finished before the kill"],
        "files checked complete after a kill": sums["files checked: complete"],
        "refusals with previous files intact": intact - sums["files checked: complete"],
        "values tried": sums["values tried"],
        "process-table checks, nothing left": sums["process table clean"],
    }


def section(run: Run | None, title: str) -> list[str]:
    if run is None:
        return [
            f"## {title}",
            "",
            "Not run in this generation of the page "
            "(`python -m tests.reliability.report --long` runs it).",
            "",
        ]
    meta = run.meta
    counts = run.outcome_counts()
    lines = [
        f"## {title}",
        "",
        f"Generated {meta['date']} by `{meta['command']}`: pytest exit status "
        f"{meta['exit_status']}, {meta['wall_seconds']:.0f} s wall on {meta['machine']}.",
        f"pytest: {meta['pytest_tail']}",
        "",
        "| Area | Tests | Pass | Fail | Known bug (xfail) | Skipped | s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for module, area in AREAS:
        c = run.outcome_counts(module)
        if not c:
            continue
        lines.append(
            f"| {area} | {sum(c.values())} | {c['passed']} | {c['failed'] + c['xpassed']}"
            f" | {c['xfailed']} | {c['skipped']} | {run.seconds(module):.1f} |"
        )
    lines.append(
        f"| **All** | {sum(counts.values())} | {counts['passed']} | "
        f"{counts['failed'] + counts['xpassed']} | {counts['xfailed']} | "
        f"{counts['skipped']} | {run.seconds():.1f} |"
    )
    lines += [
        "",
        "Headline figures: " + "; ".join(f"{k} {v:,}" for k, v in totals(run).items() if v) + ".",
        "",
    ]
    lines += ["### Bad input, fuzzed", "", *parser_table(run), ""]
    pathless = sorted(
        {
            reason
            for fig in run.figures.values()
            for reason in fig["notes"].get("issues without a file", [])
        }
    )
    if pathless:
        lines += [
            "Issues recorded without a file are conclusions drawn from several sources "
            "(every parse problem is an issue naming its file and line, which the "
            "fuzzers check); their openings: " + "; ".join(f'"{r}…"' for r in pathless) + ".",
            "",
        ]
    for module, area in AREAS[1:]:
        if run.tests(module):
            lines += [f"### {area}", "", *generic_table(run, module), ""]
    return lines


def machine() -> str:
    cpus = os.cpu_count()
    return (
        f"{platform.machine()}, {cpus} CPUs, Linux {platform.release()}, Python "
        f"{platform.python_version()}"
    )


def render(default: Run | None, long: Run | None, kept_long: str | None = None) -> str:
    from tests.reliability.known_bugs import FIXED_BUGS, KNOWN_BUGS

    lines = [
        "# Reliability: bad input, faults, writes, hostile values, processes",
        "",
        "<!-- Generated by `python -m tests.reliability.report [--long]`; do not edit. -->",
        "",
        "hwtune runs as root before every job: it must never crash a job's start, never leave",
        "a broken file and never let a value become a command. `tests/reliability/` checks",
        "that on purpose, and this page holds the figures of its last runs.",
        "",
        "- **Bad input**: every parser gets hypothesis-generated input of three kinds: built",
        "  from the format's grammar, real captures (tests/data, a shared set) with edits, and",
        "  raw text or bytes. Each must end in a result, a typed documented error",
        "  (`HwtuneError` subclasses, `CpuListError`) or an issue naming its file.",
        "- **Faults**: files of a real snapshot of this machine turned into directories,",
        "  dangling symlinks, symlink loops, EIO on read, empty or binary; CPU directories",
        "  vanishing while detect runs; every NVML call failing with each error; the",
        "  nvidia-smi fallback failing, hanging or lying; a TensorFlow installed but broken;",
        "  `configure()` with bad settings; tuned results broken the same ways. Detect must",
        "  complete with issues (no probe may raise), plan must still produce a profile that",
        "  renders, and a tuned result that cannot be used is ignored with a warning naming",
        "  its file.",
        "- **Writes**: real `hwtune apply` processes SIGKILLed at random moments; a full",
        "  tmpfs; read-only mounts; symlinks planted by another user; twenty at once.",
        "- **Hostile values**: quotes, `$(…)`, backticks, backslashes, newlines, NUL, 100 KB",
        "  strings, non-UTF-8 bytes; bash and dash source the files with a canary command.",
        "- **Processes**: `hwtune exec --instances 2` under SIGTERM/SIGINT at any moment,",
        "  failing instances with and without `--fail-fast`; the process table is checked for",
        "  a unique marker after every case.",
        "- **Hostile roots and umasks**: each file detect reads under `--root`, in turn a",
        "  link out of the root (absolute and relative), a FIFO, `/dev/zero` as a device node",
        "  (root), a sparse 1 GiB file: detect must finish (a watchdog fails a hang), no probe",
        "  may raise, nothing outside the root may appear, and issues stay short one-liners;",
        "  apply, apply, revert, apply under umask 000 and 077: nothing hwtune creates is",
        "  writable by others, outputs are 0755/0644, the journal's directories 0700.",
        "",
        "Run it: `pytest tests/reliability` (default scale, in the normal run),",
        "`pytest tests/reliability -m slow` or `HWTUNE_RELIABILITY=long pytest tests/reliability`",
        "(long scale: 10,000 inputs per parser, 200 kills), and",
        "`python -m tests.reliability.report [--long]` to regenerate this page.",
        "Tests needing root (mounts, chown) skip with the reason otherwise; the start-up",
        "signal tests need `strace` (its syscall delay injection opens the race window).",
        "",
        "## How the checks are made, and what is deliberately not checked",
        "",
        "- No assertion is about speed. The only time bounds are liveness guards (a case",
        "  that waits 60 s, or 6 s for the strace cases, for something that takes ~1 s).",
        "- A kill round passes when every output file is byte-for-byte one of the complete",
        "  versions an apply could have left (the last complete set, or the set of an apply",
        "  tried since), the next apply succeeds (rolling back an interrupted one first),",
        "  and, at the end, `hwtune revert` restores the last complete set. One kill in",
        "  three lands anywhere in the run; two in three land in the write phase (~2% of",
        "  the run): a random 0-30 ms after the apply's journal entry appears.",
        "- Detection under faults must finish with no probe raising (detect's catch-all",
        '  "probe failed unexpectedly" counts as a failure), and plan + render must work.',
        "  Each parse problem must become an issue naming its file and line; issues",
        "  without a file are allowed only as conclusions drawn from several sources.",
        "- Unreadable files are made real: as root, permission bits cannot stop a read, so",
        "  a symlink to /proc/self/mem (page 0 is never mapped: read fails with EIO) stands",
        "  for a sysfs attribute that fails its read.",
        "- FIFOs are not used: open(2) on a FIFO blocks until a writer appears, and the",
        "  probes read kernel pseudo-files or snapshots hwtune wrote, never FIFOs; guarding",
        "  every read against a state that cannot occur was judged not worth it.",
        "- Signals at random moments use bare `sleep` instances: dash catches SIGINT, and",
        "  one landing while it starts up or forks a foreground child is swallowed inside the",
        "  shell, a race of the shell, not of hwtune. The grandchild case (a shell and its",
        "  `sleep`) is covered once the instances have settled. hwtune is started with",
        "  default signal dispositions: it keeps an inherited ignore (nohup, `cmd &`) as is.",
        "- Until hwtune's launcher handles SIGINT, CPython raises KeyboardInterrupt wherever",
        "  it is, and drops it where it can only print it: in site's processing of a `.pth`",
        "  file (before any hwtune code runs) or in a callback such as importlib's module-lock",
        '  weakref callback ("Exception ignored in"): 3 of about 1,500 SIGINTs sent at a',
        "  random start-up moment here. Such a SIGINT, visible as a KeyboardInterrupt on",
        "  stderr while hwtune runs on, is sent again once, and counted; any other hang",
        "  fails the case with its seed and delay.",
        "",
        "## Known bugs found by the suite",
        "",
    ]
    if KNOWN_BUGS:
        lines += [
            "Each has a reproducer marked `xfail(strict=True)`; when it is fixed the",
            "reproducer passes, strict xfail fails the run, and the entry is removed.",
            "",
        ]
        lines += [f"- **{bug}**: {text}" for bug, text in KNOWN_BUGS.items()]
    else:
        lines.append("None open.")
    lines += [
        "",
        "Found by the suite and fixed (their reproducers stay as regression tests):",
        "",
        *(f"- **{bug}**: {text}" for bug, text in FIXED_BUGS.items()),
        "",
    ]
    lines += section(default, "Default run")
    if kept_long is not None and long is None:
        lines.append(kept_long.rstrip())
    else:
        lines += section(long, "Long run")
    return "\n".join(lines).rstrip() + "\n"


def previous_long_section(doc: Path) -> str | None:
    """The "Long run" section of the page as it is, unless it is the not-run stub."""
    if not doc.is_file():
        return None
    text = doc.read_text()
    start = text.find("\n## Long run")
    if start < 0 or "\nNot run in this generation" in text[start : start + 200]:
        return None
    return text[start + 1 :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="also run the long scale")
    parser.add_argument("--output", type=Path, default=DOC)
    args = parser.parse_args(argv)
    worst = 0
    runs: dict[str, Run | None] = {"default": None, "long": None}
    command = "python -m tests.reliability.report" + (" --long" if args.long else "")
    for name, long in (("default", False), ("long", True)):
        if long and not args.long:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            figures = Path(scratch) / "figures.jsonl"
            print(f"running the {name} scale…", file=sys.stderr, flush=True)
            code, wall, tail = run_suite(long, figures)
            worst = max(worst, code)
            meta = {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": command,
                "exit_status": code,
                "wall_seconds": wall,
                "machine": machine(),
                "pytest_tail": tail,
            }
            runs[name] = Run(load(figures), meta)
            print(f"{name}: {tail} ({wall:.0f} s)", file=sys.stderr)
    kept = None if args.long else previous_long_section(args.output)
    args.output.write_text(render(runs["default"], runs["long"], kept))
    print(f"wrote {args.output}", file=sys.stderr)
    return worst


if __name__ == "__main__":
    sys.exit(main())
