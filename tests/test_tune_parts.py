"""The tuner's parts: statistics, trial environment and failures, the space, the store."""

from __future__ import annotations

import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from hwtune.errors import TuneError
from hwtune.pipeline.measured import (
    find_result,
    forget,
    measured_settings,
    read_result,
    result_path,
    save_result,
)
from hwtune.tune.capture import parse_metrics
from hwtune.tune.config import TrialConfig, from_json, to_json, trial_env
from hwtune.tune.progress import Progress, render_line
from hwtune.tune.search import Search, SearchOutcome, SearchSettings
from hwtune.tune.space import SearchSpace
from hwtune.tune.stats import Blocked, compare, summarize
from hwtune.tune.trial import TrialResult, TrialRunner
from hwtune.tune.workloads import builtin, resolve, user_command
from tests.conftest import DATA

# -- statistics ---------------------------------------------------------------------------


def test_summary_gives_median_and_relative_spread() -> None:
    summary = summarize([100.0, 90.0, 110.0, 105.0, 95.0])
    assert summary.median == 100.0
    assert (summary.q1, summary.q3) == (95.0, 105.0)
    assert summary.spread == pytest.approx(0.10)


def test_compare_verdicts() -> None:
    assert compare([130, 131, 129], [100, 101, 99]).verdict == "better"
    assert compare([100, 101, 99], [130, 131, 129]).verdict == "worse"
    assert compare([100.0, 100.5, 99.5, 100.2], [100.1, 99.8, 100.3, 100.0]).verdict == "same"
    # 10% apart, but with 30% noise and two samples each: nobody can tell.
    assert compare([110, 80], [100, 130]).verdict == "unclear"
    assert compare([], [1.0]).verdict == "unclear"


def test_blocked_design_removes_round_to_round_drift() -> None:
    """B is 5% faster than A; the machine's load halves throughput from round to round.
    Unblocked, the drift swamps the difference; blocked, it is plain."""
    rng = random.Random(7)
    design = Blocked()
    a_values, b_values = [], []
    for round_ in range(4):
        load = 0.5**round_
        a = 1000 * load * rng.lognormvariate(0, 0.01)
        b = 1050 * load * rng.lognormvariate(0, 0.01)
        design.add("A", round_, a)
        design.add("B", round_, b)
        a_values.append(a)
        b_values.append(b)
    assert compare(b_values, a_values).verdict == "unclear"
    blocked = design.compare("B", "A")
    assert blocked.verdict == "better"
    assert blocked.ratio == pytest.approx(1.05, rel=0.02)
    sigma, df = design.sigma()
    assert df == 3 and sigma < 0.03


# -- trials -------------------------------------------------------------------------------


def test_parse_metrics_takes_the_last_value_of_each_name() -> None:
    text = (
        "epoch 1\nhwtune-metric: samples_per_sec=10\n  hwtune-metric: loss = 0.5 \n"
        "hwtune-metric: samples_per_sec=12.5e1\nhwtune-metric: bad=fast\n"
        "not a hwtune-metric: x=1\n"
    )
    assert parse_metrics(text) == {"samples_per_sec": 125.0, "loss": 0.5}


def test_trial_env_replaces_what_hwtune_controls_and_keeps_the_rest() -> None:
    base = {
        "PATH": "/bin",
        "TF_NUM_INTRAOP_THREADS": "8",
        "OMP_NUM_THREADS": "8",
        "KMP_BLOCKTIME": "1",
        "TF_XLA_FLAGS": "--x",
        "HWTUNE_TRIAL_JIT": "on",
        "HOME": "/h",
    }
    defaults = trial_env(TrialConfig(), 0, base)
    assert defaults == {
        "PATH": "/bin",
        "HOME": "/h",
        "HWTUNE_TRIAL": "1",
        "HWTUNE_TRIAL_INSTANCE": "0",
        "HWTUNE_TRIAL_INSTANCES": "1",
    }
    config = TrialConfig(
        intra=1,
        inter=2,
        onednn=False,
        jit=True,
        precision="mixed_bfloat16",
        instances=2,
        extra_env=(("KMP_BLOCKTIME", "0"),),
    )
    env = trial_env(config, 1, base, barrier="/tmp/b")
    assert env["TF_NUM_INTRAOP_THREADS"] == "1" and env["TF_NUM_INTEROP_THREADS"] == "2"
    assert env["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert env["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    assert env["HWTUNE_TRIAL_JIT"] == "on"
    assert env["HWTUNE_TRIAL_PRECISION"] == "mixed_bfloat16"
    assert env["HWTUNE_TRIAL_INSTANCE"] == "1" and env["HWTUNE_TRIAL_INSTANCES"] == "2"
    assert env["KMP_BLOCKTIME"] == "0" and "OMP_NUM_THREADS" not in env
    assert env["HWTUNE_TRIAL_BARRIER"] == "/tmp/b"


def test_config_json_round_trip() -> None:
    config = TrialConfig(2, 1, True, False, None, 2, ((0, 1), (2, 3)), (("A", "b"),))
    assert from_json(json.loads(json.dumps(to_json(config)))) == config
    assert "bf16" in config.replace(precision="mixed_bfloat16").label()


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "workload.py"
    path.write_text(body)
    return [sys.executable, "-I", "-S", str(path)]


def test_instances_run_concurrently_pinned_and_add_up(tmp_path: Path) -> None:
    argv = script(
        tmp_path,
        "import os\n"
        "index = int(os.environ['HWTUNE_TRIAL_INSTANCE'])\n"
        "print(f'hwtune-metric: rate={10 * len(os.sched_getaffinity(0)) + index}')\n",
    )  # pinned to one CPU each: 10 + 11
    cpu = min(os.sched_getaffinity(0))
    runner = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30)
    result = runner.run(TrialConfig(instances=2, cpus=((cpu,), (cpu,))))
    assert result.ok and result.value == 21.0 and result.per_instance == (10.0, 11.0)
    assert result.metric == "rate"


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2,
    reason="needs 2 usable CPUs: with one, narrowing tune's affinity changes nothing",
)
def test_a_trial_that_narrows_tunes_affinity_does_not_narrow_the_next(tmp_path: Path) -> None:
    """A workload may set its parent's (tune's) affinity: `sched_setaffinity(getppid(), {cpu})`
    left every later unpinned trial, which inherits tune's, on that one CPU."""
    start = os.sched_getaffinity(0)
    cpu = min(start)
    argv = script(
        tmp_path,
        "import os\n"
        "print(f'hwtune-metric: cpus={len(os.sched_getaffinity(0))}', flush=True)\n"
        f"os.sched_setaffinity(os.getppid(), {{{cpu}}})\n",
    )
    runner = TrialRunner(user_command(argv), environ=os.environ, timeout_s=60)
    try:
        first = runner.run(TrialConfig())
        assert os.sched_getaffinity(0) == {cpu}  # the workload did narrow its parent's
        second = runner.run(TrialConfig())
    finally:
        os.sched_setaffinity(0, start)
    assert first.ok and first.value == len(start)
    assert second.ok and second.value == len(start), second


def test_a_chatty_workload_is_scanned_not_read_whole(tmp_path: Path) -> None:
    """A workload that logs for hours writes gigabytes: the trial holds a line at a time and
    the report's tail, never the whole output (reading it whole peaked at 100 MB for this one)."""
    argv = script(
        tmp_path,
        "import sys\n"
        "noise = 'x' * 99 + '\\n'\n"
        "sys.stdout.write(noise * 200_000)\n"
        "print('hwtune-metric: rate=42', flush=True)\n"
        "sys.stdout.write(noise * 200_000)\n"
        "sys.stderr.write(noise * 200_000 + 'last words\\n')\n",
    )
    runner = TrialRunner(user_command(argv), environ=os.environ, timeout_s=60)
    tracemalloc.start()
    try:
        result = runner.run(TrialConfig())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok and result.value == 42.0
    assert result.stderr_tail.endswith("last words")
    assert peak < 2 * 1024 * 1024


def test_a_metric_line_split_across_reads_or_left_unended_counts(tmp_path: Path) -> None:
    """The output is read in pieces as it is written (capture.py): a metric line written in
    two parts (a pause between, so that each is read alone), and a last one without its
    newline, are whole lines all the same; a line longer than LINE_LIMIT is nobody's metric
    (its first 64 KiB were read as one, a value cut short), so the first one is `rate`."""
    argv = script(
        tmp_path,
        "import sys, time\n"
        "def part(text):\n"
        "    sys.stdout.write(text)\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(0.2)\n"
        "part('hwtune-metric: size=' + '9' * (40 * 1024))\n"
        "part('9' * (40 * 1024) + '\\n')\n"
        "part('noise\\nhwtune-metric: big=' + '9' * (70 * 1024) + '\\nnoise\\n')\n"
        "part('noise\\nhwtune-metric: ra')\n"
        "part('te=7\\nnoise\\n')\n"
        "part('hwtune-metric: other=3')\n",
    )
    first = TrialRunner(user_command(argv), environ=os.environ, timeout_s=60).run(TrialConfig())
    assert first.ok and first.metric == "rate" and first.value == 7.0
    last = TrialRunner(user_command(argv, metric="other"), environ=os.environ, timeout_s=60)
    assert last.run(TrialConfig()).value == 3.0


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    argv = script(
        tmp_path,
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "print('waiting on my child', file=sys.stderr, flush=True)\n"
        "time.sleep(600)\n",
    )
    # Long enough for Python to start, spawn the child and write the pidfile on a loaded CPU.
    timeout = 5.0
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=timeout).run(
        TrialConfig()
    )
    assert not result.ok and result.value is None
    assert result.failure == f"timed out after {timeout:.0f} s (per-trial timeout)"
    assert "waiting on my child" in result.stderr_tail
    assert gone(int(pidfile.read_text()))  # the grandchild went with the group


def test_a_trial_that_exits_leaves_no_process_behind(tmp_path: Path) -> None:
    """A helper the workload forked and did not stop (a feeder, an unjoined pool) would load
    the CPUs of every later trial and outlive `hwtune tune`."""
    pidfile = tmp_path / "child.pid"
    argv = script(
        tmp_path,
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "print('hwtune-metric: rate=1')\n",
    )
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=60).run(TrialConfig())
    assert result.ok, result.failure
    assert gone(int(pidfile.read_text()))


def test_a_daemon_a_trial_started_in_a_session_of_its_own_is_stopped(tmp_path: Path) -> None:
    """A daemon (fork, setsid, fork again) leaves the trial's process group, so ending the
    group misses it: it would load the CPUs of every later trial and outlive `hwtune tune`."""
    pidfile = tmp_path / "daemon.pid"
    argv = script(
        tmp_path,
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        f"while not os.path.exists({str(pidfile)!r}): time.sleep(0.01)\n"
        "print('hwtune-metric: rate=1')\n",
    )
    runner = TrialRunner(user_command(argv), environ=os.environ, timeout_s=60)
    result = runner.run(TrialConfig())
    assert result.ok, result.failure
    daemon = int(pidfile.read_text())
    assert gone(daemon)
    # … and reaped: not left as a zombie of this process (its nearest subreaper)
    stat = Path(f"/proc/{daemon}/stat")
    assert not stat.exists() or int(stat.read_text().rsplit(")", 1)[1].split()[1]) != os.getpid()


def test_a_trial_no_longer_a_child_of_tune_exits_before_it_runs(tmp_path: Path) -> None:
    """The race prctl(2) names: tune dying between the fork and PR_SET_PDEATHSIG leaves the
    child re-parented, and no parent-death signal would ever come. The child checks its parent
    and exits rather than run the workload unwatched. Here another process forks the child,
    as a re-parenting would look to it."""
    from hwtune.tune.reaper import die_with_parent

    ran = tmp_path / "ran"
    command = [sys.executable, "-I", "-S", "-c", f"open({str(ran)!r}, 'w').close()"]
    set_up = die_with_parent()  # this process as the trial's parent
    child = os.fork()
    if child == 0:  # pragma: no cover (the forked process)
        try:
            os._exit(subprocess.run(command, preexec_fn=set_up).returncode)
        finally:
            os._exit(99)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    assert not ran.exists()
    # Forked by this process, its parent, the same child runs the workload.
    assert subprocess.run(command, preexec_fn=set_up).returncode == 0
    assert ran.exists()


def test_time_whole_times_each_instance_to_its_own_exit(tmp_path: Path) -> None:
    argv = script(
        tmp_path,
        "import os, time\n"
        "time.sleep(2.0 if os.environ['HWTUNE_TRIAL_INSTANCE'] == '0' else 0.2)\n",
    )
    runner = TrialRunner(user_command(argv, time_whole=True), environ=os.environ, timeout_s=60)
    result = runner.run(TrialConfig(instances=2))
    assert result.ok, result.failure
    # instance 1 ends ~1.8 s before instance 0: its rate is its own, not instance 0's
    assert result.per_instance[1] > 2 * result.per_instance[0]


def gone(pid: int, wait_s: float = 5.0) -> bool:
    """No such process, or only its zombie (its parent died; init has yet to reap it), within
    `wait_s` (a signal is delivered at the target's next scheduling, on a busy machine later)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            print(f"process {pid} is still in state {state}")
            return False
        time.sleep(0.05)


def test_a_signal_death_and_a_bad_metric_are_failures(tmp_path: Path) -> None:
    killed = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    result = TrialRunner(user_command(killed), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.failure == "killed by SIGSEGV"
    negative = script(tmp_path, "print('hwtune-metric: rate=-3')\n")
    result = TrialRunner(user_command(negative), environ=os.environ, timeout_s=30).run(
        TrialConfig()
    )
    assert result.failure == "metric rate=-3.0 is not a positive number"
    missing = TrialRunner(
        user_command(["/nonexistent/hwtune-test-binary"]), environ=os.environ, timeout_s=30
    ).run(TrialConfig())
    assert missing.failure is not None and missing.failure.startswith("could not start")


def test_a_metric_on_stderr_counts_beside_other_metrics_on_stdout(tmp_path: Path) -> None:
    """Both streams are read, stdout first: a `--metric` logged on stderr is found though
    stdout has other metric lines, and a name on both takes stdout's value."""
    argv = script(
        tmp_path,
        "import sys\n"
        "print('hwtune-metric: loss=0.5')\n"
        "print('hwtune-metric: rate=7')\n"
        "print('hwtune-metric: rate=3', file=sys.stderr)\n"
        "print('hwtune-metric: samples_per_sec=42', file=sys.stderr)\n",
    )
    logged = user_command(argv, metric="samples_per_sec")
    result = TrialRunner(logged, environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.ok and result.value == 42.0, result.failure
    both = user_command(argv, metric="rate")
    result = TrialRunner(both, environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.ok and result.value == 7.0, result.failure
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.metric == "loss"  # the default: stdout's first name


def test_time_whole_needs_no_metric(tmp_path: Path) -> None:
    argv = script(tmp_path, "import time\ntime.sleep(0.2)\n")
    workload = user_command(argv, time_whole=True)
    result = TrialRunner(workload, environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.ok and result.metric == "wall" and 0 < (result.value or 0) < 5


def test_workload_specs() -> None:
    assert builtin("mlp").argv[1:4] == ("-m", "hwtune.tune.builtin.mlp", "--seconds")
    assert resolve(None, []).key == "builtin:cnn"
    command = resolve(None, ["python", "train.py"])
    assert command.key.startswith("cmd:") and command.display == "python train.py"
    assert resolve(None, ["python", "train.py"], name="resnet").key == "resnet"
    with pytest.raises(TuneError.__mro__[1]):  # HwtuneError (ConfigError)
        resolve("cnn", [])


# -- progress -----------------------------------------------------------------------------


class _SearchAfter:
    """What Progress reads of a search: a 60 s budget, 6 s spent, one trial, best 1.00×."""

    settings = type("S", (), {"budget_s": 60.0})()
    ratio = 1.0

    def __init__(self, trial: TrialResult) -> None:
        self.trials = (trial,)

    def elapsed(self) -> float:
        return 6.0


def test_progress_is_a_line_per_trial_when_piped_and_a_bar_on_a_terminal() -> None:
    result = TrialResult(TrialConfig(intra=1), 1234.0, 9.0)
    line = render_line(30, 120, 4, 1.25, result, 200)
    assert line.startswith("[#####···············] 0:30/2:00  4 trials  best 1.25×")
    assert line.endswith("last 1,234/s: intra=1 inter=dflt onednn=dflt jit=dflt fp32 ×1")
    assert len(render_line(30, 120, 4, 1.0, result, 40)) == 39

    piped = io.StringIO()
    Progress(piped, tty=False)(_SearchAfter(result), result)  # type: ignore[arg-type]
    assert piped.getvalue() == (
        "hwtune tune: trial 1 (0:06/1:00): 1,234/s intra=1 inter=dflt onednn=dflt jit=dflt "
        "fp32 ×1; best so far 1.00×\n"
    )
    tty = io.StringIO()
    progress = Progress(tty, tty=True)
    progress(_SearchAfter(result), result)  # type: ignore[arg-type]
    progress.finish()
    assert tty.getvalue().startswith("\r\x1b[2K[##") and tty.getvalue().endswith("\r\x1b[2K")


def test_one_trial_reads_singular_in_the_progress_and_the_report() -> None:
    """A budget that runs out after the plan's trial: "1 trial", "1 failed trial"."""
    from hwtune.tune.report import render_report
    from hwtune.tune.tuner import TuneReport, TuneRequest

    failed = TrialResult(TrialConfig(intra=1), None, 2.0, failure="exit status 1")
    assert "  1 trial  best" in render_line(30, 120, 1, 1.0, failed, 200)

    progress = Progress(io.StringIO(), tty=False)
    progress(_SearchAfter(failed), failed)  # type: ignore[arg-type]
    assert progress.summary().startswith("hwtune tune: interrupted after 1 trial in 0:06")
    start = TrialConfig(intra=1)
    space = SearchSpace(bases={1: start}, intra={1: (1,)}, inter={1: (1,)})
    outcome = SearchOutcome(start, start, 1.0, trials=[failed], stopped="budget")
    report = TuneReport(TuneRequest(builtin("mlp")), "f", start, space, outcome, {}, None)
    text = render_report(report)
    assert "  1 trial in 0:00 " in text and "  1 failed trial, never counted:" in text


def test_a_stored_result_says_where_it_applies() -> None:
    """A result applies only where its workload is named; the report said "`hwtune plan/apply`
    and hwtune.configure() now use it", as if a plain `hwtune apply` would."""
    from hwtune.tune.report import render_report
    from hwtune.tune.tuner import TuneReport, TuneRequest

    start = TrialConfig(intra=1)
    space = SearchSpace(bases={1: start}, intra={1: (1,)}, inter={1: (1,)})
    measured = TrialResult(start, 100.0, 2.0)
    outcome = SearchOutcome(start, start, 1.0, trials=[measured], stopped="converged")
    stored = Path("tuned/f/builtin_mlp.json")
    report = TuneReport(TuneRequest(builtin("mlp")), "f", start, space, outcome, {}, stored)
    text = " ".join(render_report(report).split())
    assert "now use it" not in text
    assert "used where the workload is named: `--workload builtin:mlp`" in text
    assert "hwtune.configure(workload='builtin:mlp')" in text
    assert "HWTUNE_WORKLOAD=builtin:mlp" in text


def test_progress_shows_a_slow_workloads_rate_not_zero() -> None:
    """`--time-whole` of a 20 s program is 0.05 runs/s: two significant digits, not "0/s"."""
    slow = TrialResult(TrialConfig(intra=1), 0.047, 21.0)
    assert "last 0.047/s: " in render_line(30, 120, 4, 1.0, slow, 200)
    assert "3.46/s" in render_line(30, 120, 4, 1.0, TrialResult(slow.config, 3.46, 1.0), 200)
    piped = io.StringIO()

    progress = Progress(piped, tty=False)
    progress(_SearchAfter(slow), slow)  # type: ignore[arg-type]
    assert "): 0.047/s intra=1" in piped.getvalue()
    assert "fastest trial 0.047/s with intra=1" in progress.summary()
    from hwtune.tune.report import _value

    assert _value(0.047, "wall") == "0.047 wall" and _value(1234.5, "x") == "1,234.5 x"


@pytest.mark.parametrize(
    ("value", "shown", "in_report"),
    [
        (0.0, "0", "0"),
        (0.0001, "0.0001", "0.0001"),
        (0.0000123, "0.000012", "0.000012"),  # `.2g` gave 1.2e-05
        (0.047, "0.047", "0.047"),
        (0.1, "0.1", "0.1"),
        (0.999, "1", "1"),  # two significant digits round it to 1
        (1.0, "1", "1"),
        (9.99, "9.99", "9.99"),
        (42.37, "42.4", "42.4"),
        (99.5, "99.5", "99.5"),  # `.2g` gave 1e+02
        (99.96, "100", "100.0"),
        (100.0, "100", "100.0"),
        (1234.5, "1,235", "1,234.5"),  # the report keeps its decimal, as before e7e04d0
        (1234567.0, "1,234,567", "1,234,567.0"),
    ],
)
def test_rates_are_never_in_exponent_form(value: float, shown: str, in_report: str) -> None:
    from hwtune.tune.progress import rate_text
    from hwtune.tune.report import _value

    assert rate_text(value) == shown
    assert _value(value, "x") == f"{in_report} x"
    assert "e" not in rate_text(value) and "e" not in _value(value, "")


@pytest.mark.parametrize(
    ("value", "shown", "in_report"),
    [
        (999_999_999_999_999.0, "999,999,999,999,999", "999,999,999,999,999.0"),
        (1e15, "1e+15", "1e+15"),
        (1.2345e20, "1.23e+20", "1.23e+20"),
        (1e100, "1e+100", "1e+100"),  # trial.METRIC_MAX: was a 101-digit number
        (0.000001, "0.000001", "0.000001"),
        (0.000000996, "0.000001", "0.000001"),  # rounded first
        (1.234e-7, "1.2e-07", "1.2e-07"),
        (1e-100, "1e-100", "1e-100"),  # trial.METRIC_MIN: was `0.` and 100 digits
    ],
)
def test_rates_far_out_of_the_usual_range_are_shown_in_few_characters(
    value: float, shown: str, in_report: str
) -> None:
    from hwtune.tune.progress import rate_text
    from hwtune.tune.report import _value

    assert rate_text(value) == shown
    assert _value(value, "x") == f"{in_report} x"
    assert len(rate_text(value, decimals=1)) <= 23


def test_a_trial_rate_at_the_metric_maximum_is_shown_short_in_the_progress_line(
    tmp_path: Path,
) -> None:
    from hwtune.tune.progress import trial_line

    argv = script(tmp_path, "print('hwtune-metric: rate=1e100')\n")
    result = TrialRunner(user_command(argv), environ=os.environ, timeout_s=30).run(TrialConfig())
    assert result.ok and result.value == 1e100, result.failure
    line = trial_line(1.0, 60.0, 1, 1.0, result)
    assert ": 1e+100/s " in line and "0" * 20 not in line, line


# -- the space ----------------------------------------------------------------------------


def test_space_around_the_plan_of_a_big_host() -> None:
    from hwtune.probes import detect
    from hwtune.tune.tuner import TuneRequest, prepare

    hw = detect(DATA / "hosts" / "alamb-gcp-c3-xeon8481c-spr-vm", gpus=False, tensorflow=False)
    start, space, fingerprint = prepare(hw, TuneRequest(builtin("cnn"), allow_precision=True))
    assert fingerprint and start.instances == 1 and start.precision == "mixed_bfloat16"
    # Throughput mode tunes one job: copies of a training script would be several trainings.
    assert list(space.bases) == [1]
    batch = TuneRequest(builtin("cnn"), allow_precision=True, mode="batch", model="conv")
    first, space, _ = prepare(hw, batch)
    # Batch mode starts from its copies (one per core for a CNN: 88, pinned, one thread each)
    # and searches 1, 2, 4 (the NUMA nodes), those 88 and half as many.
    assert first.instances == 88 and first.intra == 1 and first.pinned
    assert list(space.bases) == [1, 2, 4, 44, 88]
    start = space.bases[1]
    assert space.intra[1] == (1, 88, 176) and space.intra[4] == (1, 22, 44)
    assert space.precision == (None, "mixed_bfloat16")
    neighbors = space.neighbors(start)
    # inter-op 1, 2 and the plan's (one per intra-op thread): two neighbours on that axis
    assert space.inter == {1: (1, 2, 88), 2: (1, 2, 44), 4: (1, 2, 22), 44: (1, 2), 88: (1, 2)}
    # one per other setting, and each other instance count's plan
    assert len(neighbors) == len(set(neighbors)) == 11
    assert all(
        sum(
            getattr(n, k) != getattr(start, k)
            for k in ("intra", "inter", "onednn", "jit", "precision")
        )
        == 1
        for n in neighbors
        if n.instances == 1
    )
    grid = list(space.grid())
    # 72 single-instance configurations (3 intra × 3 inter × oneDNN × XLA × precision), 72
    # each for 2 and 4 instances, pinned and not (the `pinned` dimension, issue 17), and for
    # 44 and 88 copies 3 and 2 intra × 2 inter × 8, pinned and not: 72 + 2 × 2 × 72 + 2 ×
    # (48 + 32).
    assert len(grid) == len(set(grid)) == space.size() == 520
    assert start in grid and set(neighbors) <= set(grid)
    four = next(n for n in neighbors if n.instances == 4)
    # Whole NUMA nodes of 44 cores: the plan's rule pins them; the tuner may try unpinned.
    assert len(four.cpus) == 4 and not set(four.cpus[0]) & set(four.cpus[1])
    unpinned = [n for n in space.neighbors(four) if n.instances == 4 and not n.pinned]
    assert unpinned == [four.replace(cpus=())]
    _, latency, _ = prepare(hw, TuneRequest(builtin("cnn"), mode="latency"))
    assert list(latency.bases) == [1] and latency.precision == (None,)


# -- the store ----------------------------------------------------------------------------


def record(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "fingerprint": "abc123",
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "settings": {"threads.intra_op": 1, "instances": 1},
    }
    return {**base, **changes}


def test_store_round_trip_and_reason(tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(record(), environ)
    assert path == tmp_path / "abc123" / "builtin_cnn.json"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".hwtune-tmp-")]
    assert find_result("abc123", "builtin:cnn", environ=environ) == path
    measured = measured_settings(read_result(path))
    assert measured["threads.intra_op"].value == 1
    assert measured["threads.intra_op"].reason == (
        "measured: 1.31× over the rule's choice (the races' estimate, which runs high: not "
        "re-measured side by side)"
    )
    confirmed = measured_settings({**record(), "ratio_interval": [1.12, 1.52]})
    assert confirmed["threads.intra_op"].reason == (
        "measured: 1.31× over the rule's choice (95% interval 1.12-1.52×, re-measured side by "
        "side)"
    )
    kept = measured_settings({**record(), "ratio": 1.0})
    assert "(the rule's choice was the best found)" in kept["threads.intra_op"].reason
    for junk in ([1.2], [2.0, 1.0], [True, 2], ["1", "2"], [float("nan"), 2.0], 5):
        damaged = measured_settings({**record(), "ratio_interval": junk})
        assert "not re-measured" in damaged["threads.intra_op"].reason, junk
    assert measured["threads.intra_op"].source == "measured"
    assert find_result("other", "builtin:cnn", environ=environ) is None


def test_a_result_is_never_stored_over_another_workloads(tmp_path: Path) -> None:
    """`builtin:cnn` and `--name builtin_cnn` fold to one file name: the second must not
    replace the first, and a plan asking for one never applies the other's result."""
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(record(), environ)  # builtin:cnn
    with pytest.raises(TuneError, match="holds the result of workload 'builtin:cnn'"):
        save_result(record(workload="builtin_cnn"), environ)
    assert read_result(path)["workload"] == "builtin:cnn"
    save_result(record(), environ)  # the same workload again: replaced, as always


def test_forget_removes_one_workload_or_every_one(tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    a = save_result(record(workload="a"), environ)
    b = save_result(record(workload="builtin:mlp"), environ)
    other = save_result(record(fingerprint="other"), environ)
    assert forget("abc123", "nope", environ=environ) == []
    assert forget("abc123", "a", environ=environ) == [a] and not a.exists() and b.exists()
    save_result(record(workload="a"), environ)
    assert forget("abc123", environ=environ) == sorted([a, b])
    assert other.exists() and forget("gone", environ=environ) == []


def test_forget_never_removes_another_workloads_result_sharing_its_file_name(
    tmp_path: Path,
) -> None:
    """`a:b` is stored in a_b.json: `--forget a_b` names another workload and keeps it."""
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(record(workload="a:b"), environ)
    assert forget("abc123", "a_b", environ=environ) == [] and path.exists()
    assert forget("abc123", "a:b", environ=environ) == [path] and not path.exists()


def test_a_result_the_plan_cannot_use_is_ignored_with_the_file_named(tmp_path: Path) -> None:
    """A batch-mode count beyond this machine's cores: the rules plan, and the note names the
    file."""
    from hwtune.pipeline.request import PlanRequest, profile_for
    from tests.plan_builders import make_hardware

    environ = {"HWTUNE_TUNED_DIR": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    hardware = make_hardware()
    rules = profile_for(PlanRequest(environ, hardware=hardware, mode="batch")).profile
    batch = {"fingerprint": rules.fingerprint, "mode": "batch"}
    path = save_result(record(**batch, settings={"instances": 1024}), environ)
    request = PlanRequest(
        environ, hardware=hardware, workload="builtin:cnn", mode="batch", for_exec=True
    )
    planned = profile_for(request)
    assert planned.profile == rules
    assert any(n.startswith(f"tuned results ignored: {path}: ") for n in planned.notes)
    save_result(record(**batch), environ)
    planned = profile_for(request)
    assert planned.profile.threads.intra_op.source == "measured"
    assert planned.profile.measurement is not None
    assert planned.profile.measurement.file == str(path)


def test_store_default_location_follows_xdg_state_home(tmp_path: Path) -> None:
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    assert result_path("f", "builtin:mlp", environ) == (
        tmp_path / "state" / "hwtune" / "tuned" / "f" / "builtin_mlp.json"
    )


def test_a_corrupt_result_names_its_file_and_line(tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(record(), environ)
    path.write_text('{\n  "schema": 1,\n  "ratio": \n}\n')
    with pytest.raises(TuneError) as caught:
        read_result(path)
    assert str(path) in caught.value.message and "line 4" in caught.value.message
    path.write_text(json.dumps({"schema": 1, "ratio": math.pi}))
    with pytest.raises(TuneError, match="needs 'settings', 'ratio'"):
        read_result(path)


def test_an_unwritable_store_is_a_tune_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TuneError, match="cannot store the tuned result"):
        save_result(record(), {"HWTUNE_TUNED_DIR": str(blocker)})


class _SlowTail:
    """A measurement whose trials take 10 s, every fourth one 14 s, on a fake clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.count = 0

    def clock(self) -> float:
        return self.now

    def measure(self, config: TrialConfig) -> TrialResult:
        self.count += 1
        wall = 14.0 if self.count % 4 == 0 else 10.0
        self.now += wall
        value = 1000.0 * (1.2 if config.intra == 1 else 1.0) * (1 + 0.01 * (self.count % 3))
        return TrialResult(config=config, value=value, wall_s=wall, metric="x")


@pytest.mark.parametrize("budget", [85.0, 130.0, 174.0])
def test_the_budget_is_a_ceiling_even_when_trials_vary(budget: float) -> None:
    # Budgets where a median-based guess (10 s) starts a 14 s trial with 10-13 s left; the
    # slowest-so-far guess does not, once a slow trial has been seen (the 4th).
    outcome = _search_on_a_fake_clock(budget)
    assert len(outcome.trials) > 4
    assert outcome.measuring_s <= budget


def test_before_any_slow_trial_the_overrun_is_at_most_the_unseen_tail() -> None:
    outcome = _search_on_a_fake_clock(41.0)
    assert len(outcome.trials) == 4
    assert outcome.measuring_s == 44.0


def test_a_race_cut_in_its_second_round_has_completed_one() -> None:
    """3 arms of 10 s and a 35 s budget: round 1 is measured, round 2 is cut before its first
    trial; that is one completed round, not a comparison tune() may store."""
    now = [0.0]

    def measure(config: TrialConfig) -> TrialResult:
        now[0] += 10.0
        return TrialResult(config, 100.0 + (config.intra or 0), 10.0, metric="x")

    start = TrialConfig(intra=2, inter=1, onednn=True, jit=False, precision=None, instances=1)
    space = SearchSpace(
        bases={1: start},
        intra={1: (1, 2, 3)},
        inter={1: (1,)},
        onednn=(True,),
        jit=(False,),
        precision=(None,),
    )
    outcome = Search(
        space, measure, SearchSettings(budget_s=35.0, seed=0), clock=lambda: now[0]
    ).run(start)
    assert outcome.stopped == "budget" and len(outcome.trials) == 3
    assert outcome.races[0].completed == 1 and outcome.best == start


def _search_on_a_fake_clock(budget: float) -> SearchOutcome:
    start = TrialConfig(intra=2, inter=1, onednn=True, jit=False, precision=None, instances=1)
    space = SearchSpace(bases={1: start}, intra={1: (1, 2)}, inter={1: (1, 2)}, precision=(None,))
    fake = _SlowTail()
    settings = SearchSettings(budget_s=budget, seed=0)
    return Search(space, fake.measure, settings, clock=fake.clock).run(start)


def test_pinned_is_a_dimension_and_one_core_slices_start_pinned() -> None:
    """On a 2-CPU machine, two instances get one core each: the rule pins them (measured level
    or faster, issue 17) and the tuner's neighbours include the unpinned variant."""
    from hwtune.models.hardware import CpuInfo, Hardware, Limits, LogicalCpu
    from hwtune.tune.tuner import TuneRequest, prepare

    cpu = CpuInfo(
        arch="x86_64",
        physical_cores=2,
        logical_cpus=2,
        online_cpus=(0, 1),
        topology=(LogicalCpu(0, socket=0, core=0), LogicalCpu(1, socket=0, core=1)),
    )
    hw = Hardware(
        cpu=cpu, limits=Limits(affinity_cpus=(0, 1), usable_cpus=(0, 1), effective_cpus=2)
    )
    start, space, _ = prepare(hw, TuneRequest(builtin("mlp"), instances=2))
    assert start.instances == 2 and start.pinned and start.intra == 1
    assert start.cpus == ((0,), (1,))  # the rule pins one-core slices too (issue 17)
    unpinned = [n for n in space.neighbors(start) if n.instances == 2 and not n.pinned]
    assert unpinned == [start.replace(cpus=())]
    assert {c.pinned for c in space.grid()} == {True, False}
    # The move is named, so the search can make a lost pinning tabu.
    from hwtune.tune.space import changed

    assert changed(start, unpinned[0]) == ["pinned"]


def test_assumed_cpu_numbers_are_never_a_pinned_trial() -> None:
    """No CPU list detected: the slices' numbers are made up, so the plan starts unpinned and
    the search has no pinned side to measure (its trials would pin to CPUs nobody saw)."""
    from hwtune.models.hardware import CpuInfo, Hardware, Limits
    from hwtune.tune.tuner import TuneRequest, prepare

    hw = Hardware(cpu=CpuInfo(arch="x86_64", logical_cpus=4), limits=Limits(effective_cpus=4))
    start, space, _ = prepare(hw, TuneRequest(builtin("mlp"), instances=2))
    assert start.instances == 2 and not start.pinned
    assert {c.pinned for c in space.grid()} == {False}


def test_a_measured_pinning_is_stored_and_checked(tmp_path: Path) -> None:
    from hwtune.errors import TuneError
    from hwtune.pipeline.measured import read_result, save_result, settings_from_knobs

    knobs = {"intra_op": 1, "inter_op": 1, "instances": 2}
    assert settings_from_knobs(knobs, precision_searched=False, pinned=False) == {
        "threads.intra_op": 1,
        "threads.inter_op": 1,
        "instances": 2,
        "instances.pinned": False,
    }
    one = {**knobs, "instances": 1}  # one copy: nothing to pin, nothing stored
    assert "instances.pinned" not in settings_from_knobs(
        one, precision_searched=False, pinned=True
    )
    env = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    record = {"fingerprint": "f", "workload": "w", "ratio": 1.1}
    good = save_result({**record, "settings": {"instances": 2, "instances.pinned": True}}, env)
    assert read_result(good)["settings"]["instances.pinned"] is True
    bad = save_result({**record, "settings": {"instances": 2, "instances.pinned": "yes"}}, env)
    with pytest.raises(TuneError, match=r"instances\.pinned.*'yes' is not one of true, false"):
        read_result(bad)


def test_a_second_tune_on_the_machine_is_refused_while_one_runs(tmp_path: Path) -> None:
    """Two searches at once would measure each other's load; the lock is an flock, so a second
    open of it conflicts even in the same process (as a second `hwtune tune` would)."""
    from hwtune.tune.lock import one_tune_at_a_time

    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    with one_tune_at_a_time(environ):
        busy = rf"another hwtune tune \(pid {os.getpid()}\)"
        with pytest.raises(TuneError, match=busy), one_tune_at_a_time(environ):
            pass
    with one_tune_at_a_time(environ):  # released with its holder
        pass


@pytest.mark.skipif(shutil.which("flock") is None, reason="needs flock(1)")
def test_a_tune_lock_held_by_another_process_names_no_stale_pid(tmp_path: Path) -> None:
    """The refusal named the pid the lock file records, the last tune's, long gone, while
    `flock` (not hwtune) held it; /proc/locks names the holder, as for apply's lock."""
    from hwtune.tune.lock import LOCK_NAME, one_tune_at_a_time

    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    with one_tune_at_a_time(environ):  # makes the directory and the lock file
        pass
    lock = tmp_path / "cache" / "hwtune" / LOCK_NAME
    gone = subprocess.Popen(["true"])
    gone.wait()
    lock.write_text(f"{gone.pid}\n")
    holder = subprocess.Popen(
        ["flock", str(lock), "sh", "-c", "echo held; exec sleep 60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(TuneError) as refused, one_tune_at_a_time(environ):
            pass
        message = refused.value.message
        assert f"pid {gone.pid})" not in message and "another hwtune tune" not in message
        assert message.startswith(f"another process (pid {holder.pid}) holds {lock}"), message
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_that_cannot_be_made_is_a_warning_not_silence(tmp_path: Path) -> None:
    """A cache directory under a regular file cannot be made (even by root, as a read-only
    HOME): tuning goes on unlocked, and says so."""
    from hwtune.tune.lock import one_tune_at_a_time

    blocker = tmp_path / "file"
    blocker.write_text("")
    warnings: list[str] = []
    with one_tune_at_a_time({"XDG_CACHE_HOME": str(blocker)}, warn=warnings.append):
        pass
    assert len(warnings) == 1 and warnings[0].startswith(
        f"cannot take the lock {blocker / 'hwtune' / '.tune.lock'} (Not a directory): "
    )
