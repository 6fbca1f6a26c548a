"""`hwtune tune` against workloads that report their metric badly: each ends in bounded
time with a clear message, and no junk value wins or is stored."""

from __future__ import annotations

import json
import os
import sys
import tracemalloc
from pathlib import Path

from hwtune.tune.config import TrialConfig
from hwtune.tune.trial import TrialRunner
from hwtune.tune.workloads import user_command
from tests.conftest import isolated_environ, run_cli


def hostile_tune(tmp_path: Path, body: str, *extra: str) -> tuple[int, str, str, Path]:
    """`hwtune tune --json` of a Python workload `body`, on a small budget; the store."""
    script = tmp_path / "hostile.py"
    script.write_text(body)
    environ = isolated_environ(tmp_path)
    argv = ["tune", "--budget", "20", "--max-repeats", "2", "--json", *extra]
    result = run_cli([*argv, "--", sys.executable, "-I", "-S", str(script)], environ)
    return result.exit_status, result.stdout, result.stderr, Path(environ["HWTUNE_TUNED_DIR"])


def _no_constants(name: str) -> None:
    raise AssertionError(f"{name} is no JSON")


def test_a_metric_too_large_or_small_for_its_statistics_is_a_failure(tmp_path: Path) -> None:
    """1e308 is finite, but the median of two is not (stored as `Infinity`, no JSON), and a
    ratio of 1e200 to 1e-200 overflowed the comparison with a traceback."""
    for value in ("1e308", "1e200", "1e-200"):
        argv = [sys.executable, "-I", "-S", "-c", f"print('hwtune-metric: rate={value}')"]
        result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(
            TrialConfig()
        )
        assert result.value is None and result.failure is not None, value
        assert result.failure.startswith(f"metric rate={float(value):g} is out of range")
    status, out, err, store = hostile_tune(tmp_path, "print('hwtune-metric: rate=1e308')\n")
    assert status == 1 and "is out of range (1e-100 to 1e+100)" in err, err
    assert out == "" and not store.exists()
    # Within the range, what is stored is JSON.
    status, out, err, store = hostile_tune(tmp_path, "print('hwtune-metric: rate=1e99')\n")
    assert status == 0, err
    (stored,) = store.glob("*/*.json")
    assert json.loads(stored.read_text(), parse_constant=_no_constants)["best_median"] == 1e99


def test_a_carriage_return_ends_a_metric_line(tmp_path: Path) -> None:
    """A CRLF line ending, and a progress bar redrawn with \\r for longer than a line may be
    (tqdm's, cleared with `leave=False` before the metric is printed on its line), left the
    metric unread: `printed no hwtune-metric line`."""
    bar = "".join(f"\\r{step:>6}/100000 [{'#' * (step % 80):<80}]" for step in range(3000))
    body = (
        "import sys\n"
        f"sys.stderr.write({bar!r})\n"
        "sys.stderr.write('\\r' + ' ' * 100 + '\\rhwtune-metric: rate=5\\r\\n')\n"
        "sys.stdout.write('hwtune-metric: other=3\\r\\n')\n"
    )
    script = tmp_path / "bar.py"
    script.write_text(body)
    argv = [sys.executable, "-I", "-S", str(script)]
    result = TrialRunner(user_command(argv, metric="rate"), environ=os.environ, timeout_s=30).run(
        TrialConfig()
    )
    assert result.ok and result.value == 5.0, result.failure
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.ok and result.metric == "other" and result.value == 3.0, result.failure


def test_a_value_that_is_no_number_is_named_and_no_earlier_value_counts(tmp_path: Path) -> None:
    """`1,234.5` (a thousands separator) or `1234,5` (a decimal comma) was skipped: the trial
    said it `printed no hwtune-metric line`, or counted a warm-up value printed before it,
    though the last value printed is the one that counts (docs/tune.md)."""
    for printed in ("1,234.5", "1234,5"):
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"print('hwtune-metric: rate=10')\nprint('hwtune-metric: rate={printed}')",
        ]
        result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(
            TrialConfig()
        )
        assert result.value is None and result.failure is not None, printed
        assert result.failure.startswith(f"metric rate='{printed}' is not a number"), result
    status, out, err, store = hostile_tune(tmp_path, "print(f'hwtune-metric: rate={1234.5:,}')\n")
    assert status == 1 and out == "" and not store.exists()
    assert "failed: metric rate='1,234.5' is not a number" in err, err


def test_a_value_followed_by_its_unit_is_named_not_unseen(tmp_path: Path) -> None:
    """`rate=100 samples/s` was no metric line at all (`printed no hwtune-metric line`)."""
    argv = [sys.executable, "-I", "-S", "-c", "print('hwtune-metric: rate=100 samples/s ')"]
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.failure is not None and result.value is None
    assert result.failure.startswith("metric rate='100 samples/s' is not a number"), result


def test_a_workload_that_reports_then_never_exits_is_told_so(tmp_path: Path) -> None:
    """A program that prints its metric and then hangs (a thread or worker left running) used
    the whole budget on its first trial, and the error asked for twice the budget, which only
    waits twice as long."""
    body = "import time\nprint('hwtune-metric: rate=100', flush=True)\ntime.sleep(600)\n"
    status, out, err, store = hostile_tune(tmp_path, body, "--budget", "3")
    assert status == 1 and out == "" and not store.exists()
    assert "a trial printed `hwtune-metric: rate=100`, then did not exit" in err, err
    assert "make the workload exit once it has printed its metric" in err
    assert "give at least --budget" not in err


def test_a_timeout_under_a_second_is_shown_as_it_was_given(tmp_path: Path) -> None:
    """`--trial-timeout 0.5` failed trials with `timed out after 0 s`."""
    argv = [sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)"]
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=0.5).run(TrialConfig())
    assert result.failure == "timed out after 0.5 s (per-trial timeout)"


def test_a_metric_name_per_step_takes_bounded_memory(tmp_path: Path) -> None:
    """A workload naming a metric per step (`loss_step_123=…`) grew the trial's table of
    values by a name a line, ~100 bytes each, for as long as it ran (50 MB for these)."""
    body = (
        "import sys\n"
        "lines = (f'hwtune-metric: loss_step_{i}=0.5\\n' for i in range(300_000))\n"
        "sys.stdout.write(''.join(lines))\n"
        "print('hwtune-metric: rate=7')\n"
    )
    script = tmp_path / "steps.py"
    script.write_text(body)
    argv = [sys.executable, "-I", "-S", str(script)]
    runner = TrialRunner(user_command(argv, metric="rate"), environ=os.environ, timeout_s=60)
    tracemalloc.start()
    try:
        result = runner.run(TrialConfig())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok and result.value == 7.0, result.failure
    assert peak < 4 * 1024 * 1024, peak


def test_a_metric_line_behind_a_logging_prefix_is_quoted_in_the_failure(tmp_path: Path) -> None:
    """Logged with logging's default format (`INFO:root:hwtune-metric: rate=5`), the metric
    line is not one, and the failure said only `printed no hwtune-metric line`, though the
    workload had printed it (on stdout, not even in the failure's stderr tail)."""
    body = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "logging.info('hwtune-metric: rate=5')\n"
    )
    script = tmp_path / "logged.py"
    script.write_text(body)
    argv = [sys.executable, "-I", "-S", str(script)]
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.failure == (
        "printed no `hwtune-metric: <name>=<value>` line: 'INFO:root:hwtune-metric: rate=5' "
        "does not read as one (`hwtune-metric: NAME=VALUE` must start its line, with nothing "
        "such as a logging prefix before it)"
    )
