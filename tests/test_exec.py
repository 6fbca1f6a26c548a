"""`hwtune exec` and the Launcher: real processes, real affinity, real signals."""

from __future__ import annotations

import errno
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hwtune.apply.launch import (
    MPOL_BIND,
    InstanceSpec,
    env_for_instance,
    get_mempolicy,
    instance_pinning,
    merge_environment,
    set_mempolicy,
)
from hwtune.apply.launcher import FORWARDED_SIGNALS, Launcher, exit_status
from hwtune.apply.marker import MARKER, hwtune_owned, marker_value
from hwtune.errors import CommandNotStarted, HwtuneError
from hwtune.models.hardware import Gpu, Hardware
from hwtune.pipeline.request import PlanRequest, profile_for
from tests.apply_profiles import PYTHON, make_profile
from tests.conftest import needs_two_cores
from tests.conftest import physical_core_count as _cores

HWTUNE = [PYTHON, "-m", "hwtune"]
# Prints what the child sees: its instance, its CPUs and the variables it got.
REPORT = (
    "import os, json; print(json.dumps({'instance': os.environ.get('HWTUNE_INSTANCE'), "
    "'cpus': sorted(os.sched_getaffinity(0)), 'env': dict(os.environ)}))"
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_"))}
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"), **extra
    )
    env.pop("LOCAL_RANK", None)
    return env


def _run_exec(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`hwtune exec ARGS -- python -c REPORT`: each child prints what it sees."""
    return subprocess.run(
        [*HWTUNE, "exec", *args, "--", PYTHON, "-c", REPORT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@needs_two_cores
def test_two_instances_get_disjoint_cpus_and_only_planned_knobs(tmp_path: Path) -> None:
    env = _env(tmp_path)
    result = _run_exec(["--instances", "2"], env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sorted(line[:4] for line in lines) == ["[0] ", "[1] "]
    seen = {json.loads(line[4:])["instance"]: json.loads(line[4:]) for line in lines}
    cpus = [set(seen[i]["cpus"]) for i in ("0", "1")]
    first = profile_for(PlanRequest(env, instances=2, instance=0))
    pinned = instance_pinning(first.profile, first.hardware).pinned
    if pinned:  # slices of 2+ cores (issue 17's rule): disjoint affinities
        assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], cpus
    else:  # one-core slices: both keep every usable CPU, and the reason is said once
        assert cpus[0] == cpus[1] == set(os.sched_getaffinity(0)), cpus
        assert result.stderr.count("instances are left unpinned") == 1, result.stderr
    for index in (0, 1):
        planned = profile_for(PlanRequest(env, instances=2, instance=index))
        if pinned:
            assert set(seen[str(index)]["cpus"]) == set(planned.profile.instance.cpus)
        child_env = seen[str(index)]["env"]
        added = {k: v for k, v in child_env.items() if env.get(k) != v}
        expected = env_for_instance(planned.profile, index, hardware=planned.hardware)
        # The planned knobs, HWTUNE_INSTANCE(S) and the marker of what hwtune wrote, nothing else.
        assert added == {**expected, MARKER: marker_value(expected)}
        assert child_env["HWTUNE_INSTANCES"] == "2"


def test_one_instance_replaces_hwtune(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [*HWTUNE, "exec", "--", PYTHON, "-c", "import os; print(os.getpid())"],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and int(out) == child.pid


@needs_two_cores
def test_slurm_rank_runs_its_own_slice(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        SLURM_LOCALID="1",
        SLURM_TASKS_PER_NODE="2(x2)",
        SLURM_NODEID="1",
        SLURM_STEP_ID="0",
    )
    result = subprocess.run(
        [*HWTUNE, "exec", "--", PYTHON, "-c", REPORT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    planned = profile_for(PlanRequest(_env(tmp_path), instances=2, instance=1))
    assert seen["instance"] == "1" and seen["env"]["HWTUNE_INSTANCES"] == "2"
    if instance_pinning(planned.profile, planned.hardware).pinned:
        assert set(seen["cpus"]) == set(planned.profile.instance.cpus)
    else:  # one-core slices stay unpinned (issue 17), the rank included
        assert set(seen["cpus"]) == set(os.sched_getaffinity(0))
        assert seen["env"]["TF_NUM_INTRAOP_THREADS"] == str(planned.profile.threads.intra_op.value)
    assert "local rank 1 of 2 (Slurm" in result.stderr


def _launch(script: str, count: int, **kwargs: object) -> tuple[int, bytes, bytes]:
    out, err = io.BytesIO(), io.BytesIO()
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    specs = [InstanceSpec(i, {**os.environ, "I": str(i)}, cpus) for i in range(count)]
    launcher = Launcher([PYTHON, "-c", script], specs, stdout=out, stderr=err, **kwargs)  # type: ignore[arg-type]
    return launcher.run(), out.getvalue(), err.getvalue()


def test_output_is_prefixed_per_line_and_streams_kept_apart() -> None:
    script = "import sys, os; sys.stdout.write('a\\nb\\npartial'); sys.stderr.write('oops\\n')"
    status, out, err = _launch(script, 2)
    assert status == 0
    assert sorted(out.decode().splitlines()) == [
        "[0] a",
        "[0] b",
        "[0] partial",
        "[1] a",
        "[1] b",
        "[1] partial",
    ]
    assert sorted(err.decode().splitlines()) == ["[0] oops", "[1] oops"]


def test_worst_exit_status_wins() -> None:
    script = (
        "import os, signal; i = int(os.environ['I'])\n"
        "os.kill(os.getpid(), signal.SIGKILL) if i == 2 else exit(3 * i)"
    )
    status, _, _ = _launch(script, 3)
    assert status == 128 + signal.SIGKILL
    status, _, _ = _launch("import os; exit(3 * int(os.environ['I']))", 2)
    assert status == 3
    assert exit_status(-15) == 143 and exit_status(4) == 4


def test_fail_fast_takes_the_others_down_and_exits_with_the_failure() -> None:
    """The siblings hwtune terminates die of its SIGTERM (143): the status is the failure's."""
    script = "import os, time; exit(4) if os.environ['I'] == '0' else time.sleep(120)"
    sink = io.BytesIO()
    specs = [InstanceSpec(i, {**os.environ, "I": str(i)}) for i in range(3)]
    launcher = Launcher(
        [PYTHON, "-c", script], specs, stdout=sink, stderr=sink, fail_fast=True, kill_after=5.0
    )
    assert launcher.run() == 4
    assert [launcher.children[i].returncode for i in (1, 2)] == [-signal.SIGTERM] * 2


TRAP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(0)))\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@needs_two_cores
def test_sigterm_is_forwarded_to_every_instance(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [*HWTUNE, "exec", "--instances", "2", "--", PYTHON, "-c", TRAP],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert child.stdout is not None
    ready = [child.stdout.readline() for _ in range(2)]
    assert sorted(ready) == ["[0] ready\n", "[1] ready\n"]
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert sorted(out.splitlines()) == ["[0] got TERM", "[1] got TERM"]
    assert child.returncode == 0


# Prints the instance's blocked and ignored signal masks (hex, from /proc/self/status).
SIGNAL_MASKS = (
    "import json; f = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines()"
    " if ':\\t' in l); print(json.dumps({k: int(f[k], 16) for k in ('SigBlk', 'SigIgn')}))"
)


def test_instances_start_with_default_signals_and_inherited_ignores_kept() -> None:
    """The forwarded signals are blocked in hwtune while an instance starts: the instance
    must not inherit that mask, nor hwtune's handlers; one ignored by whoever started hwtune
    (nohup: SIGHUP) stays ignored, as across execve."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # What this process ignores, SIGHUP now included: a test run started in the background
    # (`cmd &` in a script) also ignores SIGINT and SIGQUIT, and those must stay ignored too.
    inherited = {sig for sig in FORWARDED_SIGNALS if signal.getsignal(sig) == signal.SIG_IGN}
    try:
        status, out, _ = _launch(SIGNAL_MASKS, 2)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert status == 0 and signal.SIGHUP in inherited
    bit = {sig: 1 << (sig - 1) for sig in FORWARDED_SIGNALS}
    for line in out.decode().splitlines():
        masks = json.loads(line.split("] ", 1)[1])
        assert not any(masks["SigBlk"] & b for b in bit.values()), line
        ignored = {sig for sig, b in bit.items() if masks["SigIgn"] & b}
        assert ignored == inherited, line
    assert signal.getsignal(signal.SIGHUP) == previous  # and hwtune's own are put back


class _SignalledWhileStarting(Launcher):
    """Sends hwtune (this process) SIGUSR1 as each instance starts, with the forwarded
    signals blocked in this thread: the kernel hands it to another thread, and CPython runs
    the handler here before the instance is registered (what a stuck NVML probe thread
    causes in `hwtune exec`)."""

    def _start(self, spec: InstanceSpec) -> subprocess.Popen[bytes]:
        os.kill(os.getpid(), signal.SIGUSR1)
        return super()._start(spec)


def test_a_signal_handled_in_another_thread_during_start_still_reaches_the_instance() -> None:
    quiet = threading.Event()
    other = threading.Thread(target=quiet.wait, daemon=True)  # does not block the signals
    other.start()
    sink = io.BytesIO()
    specs = [InstanceSpec(i, dict(os.environ)) for i in range(2)]
    launcher = _SignalledWhileStarting(
        [PYTHON, "-c", "import time; time.sleep(30)"], specs, stdout=sink, stderr=sink
    )
    try:
        status = launcher.run()
    finally:
        quiet.set()
    # SIGUSR1's default action ends each instance; one it never reached would sleep 30 s
    assert status == 128 + signal.SIGUSR1
    assert {c.returncode for c in launcher.children.values()} == {-signal.SIGUSR1}


def test_an_instance_that_cannot_start_stops_the_started_ones() -> None:
    specs = [
        InstanceSpec(0, dict(os.environ)),
        InstanceSpec(1, {**os.environ, "X_NUL": "a\0b"}),  # found only as instance 1 starts
    ]
    sink = io.BytesIO()
    launcher = Launcher(
        [PYTHON, "-c", "import time; time.sleep(120)"],
        specs,
        stdout=sink,
        stderr=sink,
        kill_after=5.0,
    )
    with pytest.raises(HwtuneError, match="'X_NUL' cannot be passed"):
        launcher.run()
    assert launcher.children[0].returncode == -signal.SIGTERM  # stopped and reaped


def test_instances_on_cpus_the_kernel_refuses_start_none() -> None:
    """A plan made for another machine (--hardware) can give an instance CPUs this one lacks:
    the error names the instance, its CPUs and the kernel's reason, and nothing starts."""
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    specs = [
        InstanceSpec(0, dict(os.environ), cpus),
        InstanceSpec(1, dict(os.environ), (1 << 20,)),  # no such CPU: EINVAL
    ]
    sink = io.BytesIO()
    launcher = Launcher(["true"], specs, stdout=sink, stderr=sink)
    reason = os.strerror(errno.EINVAL)
    with pytest.raises(HwtuneError, match=f"cannot pin instance 1 to CPU 1048576: {reason}"):
        launcher.run()
    assert not launcher.children
    specs[1] = InstanceSpec(1, dict(os.environ), (1 << 20, (1 << 20) + 1))
    with pytest.raises(HwtuneError, match="cannot pin instance 1 to CPUs 1048576-1048577: "):
        Launcher(["true"], specs, stdout=sink, stderr=sink).run()
    assert os.sched_getaffinity(0) == set(cpus)  # the check left this process's mask alone


def test_a_nul_in_the_environment_is_a_clear_error() -> None:
    specs = [InstanceSpec(i, {"PATH": os.environ["PATH"], "X_NUL": "a\0b"}) for i in range(2)]
    sink = io.BytesIO()
    launcher = Launcher(["true"], specs, stdout=sink, stderr=sink)
    with pytest.raises(HwtuneError, match="'X_NUL' cannot be passed"):
        launcher.run()
    assert not launcher.children


MEMPOLICY = (
    "import sys; sys.path.insert(0, {repo!r})\n"
    "from hwtune.apply.launch import get_mempolicy\n"
    "print(get_mempolicy())\n"
)


def test_numa_policy_is_set_in_the_child_and_survives_exec() -> None:
    repo = str(Path(__file__).resolve().parent.parent)
    out, err = io.BytesIO(), io.BytesIO()
    spec = InstanceSpec(0, dict(os.environ), (min(os.sched_getaffinity(0)),), (0,))
    plain = InstanceSpec(1, dict(os.environ))
    status = Launcher(
        [PYTHON, "-c", MEMPOLICY.format(repo=repo)], [spec, plain], stdout=out, stderr=err
    ).run()
    assert status == 0, err.getvalue()
    lines = dict(line.split(" ", 1) for line in out.getvalue().decode().splitlines())
    assert lines["[0]"] == f"({MPOL_BIND}, (0,))"
    assert lines["[1]"] == "(0, ())"  # untouched: the default policy


def test_set_mempolicy_round_trip_in_a_subprocess() -> None:
    code = (
        "from hwtune.apply.launch import set_mempolicy, get_mempolicy, MPOL_BIND, MPOL_DEFAULT\n"
        "set_mempolicy(MPOL_BIND, [0]); a = get_mempolicy()\n"
        "set_mempolicy(MPOL_DEFAULT, []); print(a, get_mempolicy())\n"
    )
    result = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "(2, (0,)) (0, ())", result.stderr
    with pytest.raises(OSError):
        set_mempolicy(MPOL_BIND, [4000])  # no such node: EINVAL, raised, not ignored
    assert get_mempolicy()[0] == 0  # this process is unchanged


def test_user_variables_win_and_gpus_use_uuids() -> None:
    merged, notes = merge_environment(
        {"A": "mine", "HWTUNE_INSTANCE": "9"}, {"A": "plan", "HWTUNE_INSTANCE": "1", "B": "2"}
    )
    assert merged == {
        "A": "mine",
        "HWTUNE_INSTANCE": "1",
        "B": "2",
        MARKER: marker_value({"HWTUNE_INSTANCE": "1", "B": "2"}),  # A stays the user's
    }
    assert "keeping A='mine'" in notes[0]
    profile = make_profile(instances=((0,), (1,)), gpus=((0,), (1,)))
    hw = Hardware(gpus=(Gpu(0, "A100", uuid="GPU-aaa"), Gpu(1, "A100", uuid="GPU-bbb")))
    assert env_for_instance(profile, 1, hardware=hw)["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"
    plain = env_for_instance(profile, 1)
    assert plain["CUDA_VISIBLE_DEVICES"] == "1" and plain["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES" not in env_for_instance(make_profile(), 0)


def test_exec_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [*HWTUNE, "exec", "--"], capture_output=True, text=True, env=_env(tmp_path), timeout=60
    )
    assert result.returncode == 2 and "no command" in result.stderr


def test_missing_command_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [*HWTUNE, "exec", "--", "/nonexistent/cmd"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    # 127, as POSIX has env and nohup report a command not found: the job never ran
    assert result.returncode == 127 and "cannot run '/nonexistent/cmd'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_command_that_cannot_be_executed_exits_126(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    script.chmod(0o644)
    for extra in ([], ["--instances", "2"] if _cores() >= 2 else []):
        result = subprocess.run(
            [*HWTUNE, "exec", *extra, "--", str(script)],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
        )
        assert result.returncode == 126, (extra, result.stderr)
        assert "cannot run" in result.stderr and "Traceback" not in result.stderr


def test_an_empty_command_name_is_not_found(tmp_path: Path) -> None:
    """`env ""` exits 127: POSIX exec has ENOENT for an empty file name."""
    for extra in ([], ["--instances", "2"] if _cores() >= 2 else []):
        result = subprocess.run(
            [*HWTUNE, "exec", *extra, "--", ""],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
        )
        assert result.returncode == 127, (extra, result.stderr)
        assert "cannot run ''" in result.stderr and "Traceback" not in result.stderr
    sink = io.BytesIO()
    specs = [InstanceSpec(i, dict(os.environ)) for i in range(2)]
    launcher = Launcher([""], specs, stdout=sink, stderr=sink)
    with pytest.raises(CommandNotStarted) as caught:
        launcher.run()
    assert caught.value.not_found and not launcher.children


def test_one_instance_starts_with_sigpipe_at_its_default(tmp_path: Path) -> None:
    """Python ignores SIGPIPE and SIGXFSZ; the command it execs must not inherit that, or
    `hwtune exec -- yes | head` would never see its reader go away as a signal."""
    result = subprocess.run(
        [*HWTUNE, "exec", "--no-pin", "--", "grep", "SigIgn", "/proc/self/status"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    ignored = int(result.stdout.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert not ignored & (1 << (signal.SIGXFSZ - 1))
    piped = subprocess.run(
        f"{' '.join(HWTUNE)} exec --no-pin -- yes | head -1; echo ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert piped.stdout.split() == ["y", str(128 + signal.SIGPIPE)], piped.stderr


def test_one_instance_on_cpus_the_kernel_refuses_is_a_clear_error() -> None:
    """A plan made for another machine (--hardware, --root) can name CPUs this one lacks."""
    code = (
        "from hwtune.apply.launch import InstanceSpec, exec_replace\n"
        "from hwtune.errors import HwtuneError\n"
        "try:\n"
        "    exec_replace(['true'], InstanceSpec(0, {}, cpus=(4095,)))\n"
        "except HwtuneError as err:\n"
        "    print(err.message)\n"
        "    raise SystemExit(3)\n"
    )
    result = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith("cannot pin to CPU 4095: ")  # one CPU: not "CPUs 4095"


def test_instances_are_not_pinned_to_cpu_numbers_no_list_gave(tmp_path: Path) -> None:
    """A hardware model without CPU lists (only a count of 8) numbers the slices' CPUs from 0:
    pinned to them, instance 1 would get CPUs 4-7, which this machine may lack (EINVAL) or
    hold for others. Both start with hwtune's own affinity, pools capped, said once."""
    from hwtune.models.convert import dump
    from hwtune.models.hardware import CpuInfo, Limits

    model = Hardware(cpu=CpuInfo(arch="x86_64", logical_cpus=8), limits=Limits(effective_cpus=8))
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(dump(model)))
    result = _run_exec(["--hardware", str(path), "--instances", "2"], _env(tmp_path))
    assert result.returncode == 0, result.stderr
    seen = [json.loads(line[4:]) for line in result.stdout.splitlines()]
    everything = sorted(os.sched_getaffinity(0))
    assert [s["cpus"] for s in seen] == [everything, everything]
    assert {s["env"]["TF_NUM_INTRAOP_THREADS"] for s in seen} == {"4"}
    assert result.stderr.count("no CPU list was detected, so there is nothing true to pin") == 1


@needs_two_cores
def test_a_measured_instance_count_is_for_batch_mode_only(tmp_path: Path) -> None:
    """`hwtune tune` searches the count in batch mode only; exec starts the copies it measured
    there. A throughput-mode result with two instances (stored by a version that searched the
    count in every mode) must not have exec start two trainings."""
    from hwtune.pipeline.measured import save_result

    env = _env(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    fingerprint = profile_for(PlanRequest(env)).profile.fingerprint
    record = {"fingerprint": fingerprint, "workload": "serve", "ratio": 1.9, "mode": "batch"}
    save_result({**record, "settings": {"instances": 2, "threads.intra_op": 1}}, env)
    ran = _run_exec(["--workload", "serve", "--mode", "batch"], env)
    assert ran.returncode == 0, ran.stderr
    seen = [json.loads(line[4:]) for line in ran.stdout.splitlines()]
    assert sorted(s["instance"] for s in seen) == ["0", "1"]  # the copies the result measured
    assert {s["env"]["TF_NUM_INTRAOP_THREADS"] for s in seen} == {"1"}
    # Every other command plans copy 0's share of those copies, with the measured threads.
    planned = profile_for(PlanRequest(env, workload="serve", mode="batch")).profile
    assert planned.intent.instances == 2 and planned.threads.intra_op.source == "measured"
    # The same result stored in throughput mode: one copy, the rules' threads, and why.
    save_result(
        {**record, "mode": "throughput", "settings": {"instances": 2, "threads.intra_op": 1}},
        env,
    )
    older = _run_exec(["--workload", "serve"], env)
    assert older.returncode == 0, older.stderr
    one = json.loads(older.stdout)  # one copy: its output is not prefixed
    assert one["env"]["HWTUNE_INSTANCES"] == "1" and one["env"]["TF_NUM_INTRAOP_THREADS"] != "1"
    assert "measured for 2 instances, planning 1 (a measured count holds in batch" in older.stderr
    # Without the workload named, exec runs one copy with the rules.
    alone = subprocess.run(
        [*HWTUNE, "exec", "--", PYTHON, "-c", REPORT],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert json.loads(alone.stdout)["env"]["HWTUNE_INSTANCES"] == "1"


@needs_two_cores
@pytest.mark.parametrize("measured", [True, False])
def test_exec_pins_as_the_tuner_measured(tmp_path: Path, measured: bool) -> None:
    """A stored `pinned` pick for two copies replaces the pinning rule, either way; a plan of
    one instance never takes it."""
    from hwtune.pipeline.measured import save_result

    env = _env(tmp_path, HWTUNE_TUNED_DIR=str(tmp_path / "tuned"))
    fingerprint = profile_for(PlanRequest(env)).profile.fingerprint
    settings = {"instances": 2, "threads.intra_op": 1, "instances.pinned": measured}
    record = {"fingerprint": fingerprint, "workload": "serve", "ratio": 1.2, "mode": "batch"}
    save_result({**record, "settings": settings}, env)
    ran = _run_exec(["--workload", "serve", "--mode", "batch"], env)
    assert ran.returncode == 0, ran.stderr
    seen = {
        json.loads(line[4:])["instance"]: json.loads(line[4:]) for line in ran.stdout.splitlines()
    }
    request = PlanRequest(
        env, workload="serve", mode="batch", for_exec=True, instances=2, instance=0
    )
    planned = profile_for(request)
    shown = planned.profile.pinning  # what `plan --json` and `explain` show too
    assert shown is not None and shown.value is measured and shown.source == "measured"
    pinning = instance_pinning(planned.profile, planned.hardware)
    assert pinning.pinned is measured and "`hwtune tune` measured" in pinning.reason
    everything = set(os.sched_getaffinity(0))
    cpus = [set(seen[i]["cpus"]) for i in ("0", "1")]
    if measured:
        assert cpus[0] and cpus[1] and not cpus[0] & cpus[1], cpus
    else:
        assert cpus[0] == cpus[1] == everything, cpus
        assert "left unpinned, as `hwtune tune` measured" in ran.stderr
    # A plan of one instance has no copies to pin.
    alone = profile_for(PlanRequest(env, workload="serve", mode="batch", instances=1))
    assert alone.profile.pinning is None


# `hwtune exec --instances N -- sh -c SCRIPT` in a process of its own (no planning, so no
# cores needed): a Launcher relaying to its own stdout and stderr, exiting with its status.
SUPERVISOR = (
    "import os, sys; sys.path.insert(0, {repo!r})\n"
    "from hwtune.apply.launch import InstanceSpec\n"
    "from hwtune.apply.launcher import Launcher\n"
    "specs = [InstanceSpec(i, {{**os.environ, 'I': str(i)}}) for i in range({count})]\n"
    "out, err = sys.stdout.buffer, sys.stderr.buffer\n"
    "sys.exit(Launcher(['sh', '-c', {script!r}], specs, stdout=out, stderr=err).run())\n"
)


def _supervise(script: str, count: int = 2) -> subprocess.Popen[str]:
    repo = str(Path(__file__).resolve().parent.parent)
    code = SUPERVISOR.format(repo=repo, count=count, script=script)
    return subprocess.Popen(
        [PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _instance_pids(supervisor: subprocess.Popen[str], count: int = 2) -> list[int]:
    """The PIDs the instances print first (`echo $$`), from their "[i] PID" lines."""
    assert supervisor.stdout is not None
    return [int(supervisor.stdout.readline().split()[1]) for _ in range(count)]


def _state(pid: int) -> str:
    """The process's state letter from /proc/PID/stat (proc(5)): "T" stopped, "Z" a zombie,
    "" gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def _eventually(condition: Callable[[], bool], within: float = 10.0) -> bool:
    """Whether `condition` holds within `within` seconds: a signal is acted on when its target
    next runs, not when kill(2) returns."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:
        if _state(pid) not in ("", "Z"):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_instances_die_with_a_killed_hwtune() -> None:
    """SIGKILL (timeout -k, the OOM killer) gives hwtune no chance to forward anything: the
    instances, each in a process group of its own, get SIGKILL from the kernel instead."""
    supervisor = _supervise('trap "" TERM; echo $$; exec sleep 30')
    pids = _instance_pids(supervisor)
    try:
        supervisor.kill()
        supervisor.wait(timeout=30)  # not communicate: a surviving instance holds the pipes
        assert _eventually(lambda: all(_state(pid) in ("", "Z") for pid in pids)), [
            _state(pid) for pid in pids
        ]
    finally:
        _kill_leftovers(pids)
        for pipe in (supervisor.stdout, supervisor.stderr):
            assert pipe is not None
            pipe.close()


@pytest.mark.skipif(
    signal.getsignal(signal.SIGTSTP) == signal.SIG_IGN,
    reason="SIGTSTP is ignored in this test run, and hwtune keeps an inherited ignore",
)
def test_ctrl_z_stops_the_instances_and_sigcont_resumes_them() -> None:
    """The terminal sends SIGTSTP to its foreground group only, and `fg` sends SIGCONT to it:
    hwtune's, which the instances are not in."""
    supervisor = _supervise("echo $$; exec sleep 30")
    pids = _instance_pids(supervisor)
    everyone = [supervisor.pid, *pids]
    try:
        supervisor.send_signal(signal.SIGTSTP)
        assert _eventually(lambda: all(_state(pid) == "T" for pid in everyone)), [
            _state(pid) for pid in everyone
        ]
        supervisor.send_signal(signal.SIGCONT)
        assert _eventually(lambda: not any(_state(pid) == "T" for pid in everyone)), [
            _state(pid) for pid in everyone
        ]
        supervisor.send_signal(signal.SIGTERM)  # forwarded: `sleep` dies of it
        supervisor.communicate(timeout=30)
        assert supervisor.returncode == 128 + signal.SIGTERM
    finally:
        supervisor.kill()
        _kill_leftovers(pids)


# On SIGTERM the instance starts `sleep` and exits: the sleep joins the instance's group after
# the forwarded SIGTERM was sent, as the command a shell was forking when it came does. (Popen
# returns once `sleep` runs, so it has no handler of its parent's to lose a signal to.)
LATE_JOINER = (
    "import os, signal, subprocess, time\n"
    "def stop(*_):\n"
    "    print(subprocess.Popen(['sleep', '300']).pid, flush=True)\n"
    "    os._exit(143)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(300)\n"
)


def test_a_process_that_joins_an_instance_as_sigterm_comes_is_stopped_too() -> None:
    """kill(2) on a process group reaches the members it has then. A shell forking its command
    as SIGTERM comes (signals blocked, as dash does around vfork) dies of it once the fork is
    done, and the child it made was never sent it: it ran on, orphaned, after hwtune exited.
    Here each instance makes that child on purpose, as SIGTERM comes, so the forwarded SIGTERM
    cannot reach it; hwtune sends SIGTERM to the group again once the instance has ended."""
    supervisor = _supervise(f"exec {shlex.quote(PYTHON)} -c {shlex.quote(LATE_JOINER)}")
    instances = _instance_pids(supervisor)
    late: list[int] = []
    try:
        supervisor.send_signal(signal.SIGTERM)
        late = _instance_pids(supervisor)  # each one's `sleep`
        supervisor.communicate(timeout=30)
        assert supervisor.returncode == 128 + signal.SIGTERM
        assert _eventually(lambda: all(_state(pid) in ("", "Z") for pid in late)), [
            _state(pid) for pid in late
        ]
    finally:
        supervisor.kill()
        _kill_leftovers(instances + late)


def test_a_process_that_joins_an_instance_as_a_start_failure_stops_it_is_stopped_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race where an instance could not start and hwtune stops those that did
    (_stop_started): instance 0 starts `sleep` from its SIGTERM handler and exits, and
    instance 1 fails only once instance 0's handler is in place. Before, hwtune reaped
    instance 0 at once and its sleep ran on, orphaned, every time."""
    ready, late_pid = tmp_path / "ready", tmp_path / "late"
    script = (
        "import os, pathlib, signal, subprocess, time\n"
        "def stop(*_):\n"
        "    p = subprocess.Popen(['sleep', '300'])\n"
        f"    pathlib.Path({str(late_pid)!r}).write_text(str(p.pid))\n"
        "    os._exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        f"pathlib.Path({str(ready)!r}).write_text('up')\n"
        "time.sleep(300)\n"
    )
    start = Launcher._start

    def start_then_fail(self: Launcher, spec: InstanceSpec) -> subprocess.Popen[bytes]:
        if spec.index == 0:
            return start(self, spec)
        assert _eventually(ready.exists), "instance 0 never installed its handler"
        raise HwtuneError("instance 1 cannot start (made to fail by the test)")

    monkeypatch.setattr(Launcher, "_start", start_then_fail)
    sink = io.BytesIO()
    specs = [InstanceSpec(0, dict(os.environ)), InstanceSpec(1, dict(os.environ))]
    launcher = Launcher([PYTHON, "-c", script], specs, stdout=sink, stderr=sink, kill_after=5.0)
    late = 0
    try:
        with pytest.raises(HwtuneError, match="made to fail"):
            launcher.run()
        assert launcher.children[0].returncode == 143
        late = int(late_pid.read_text())
        assert _eventually(lambda: _state(late) in ("", "Z")), _state(late)
    finally:
        _kill_leftovers([c.pid for c in launcher.children.values()] + ([late] if late else []))


def test_a_gone_stdout_ends_the_instances_as_a_pipe_would() -> None:
    """`hwtune exec --instances 2 -- CMD | head -2` ends as `CMD | head -2` does: each instance
    gets SIGPIPE (EPIPE where ignored) on its next write, and stderr is still relayed."""
    script = (
        '[ "$I" = 1 ] && trap "" PIPE\n'  # instance 1 sees EPIPE, writes to stderr, exits 0
        "while echo line; do sleep .05; done\n"
        "echo stdout gone >&2\n"
    )
    supervisor = _supervise(script)
    assert supervisor.stdout is not None
    try:
        assert [supervisor.stdout.readline()[4:] for _ in range(2)] == ["line\n"] * 2
        supervisor.stdout.close()
        _, err = supervisor.communicate(timeout=30)
    finally:
        supervisor.kill()
    assert supervisor.returncode == 128 + signal.SIGPIPE, err  # instance 0's death
    assert "[1] stdout gone" in err.splitlines()
    assert "Traceback" not in err and "Exception ignored" not in err


@needs_two_cores
def test_a_child_of_exec_plans_the_instances_it_names(tmp_path: Path) -> None:
    """`hwtune env --instances 1` in each copy of `hwtune exec --instances 2`. Before: the
    second copy's HWTUNE_INSTANCE=1 stayed its index ("instance 1 does not exist", exit 1)."""
    child = [*HWTUNE, "env", "--instances", "1", "--format", "json"]
    done = subprocess.run(
        [*HWTUNE, "exec", "--instances", "2", "--no-prefix", "--", *child],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "does not exist" not in done.stderr
    assert done.stdout.count('"TF_NUM_INTRAOP_THREADS"') == 2


def _reports(stdout: str) -> dict[str, Any]:
    """Each "[i] REPORT" line of `hwtune exec --instances N`, by i."""
    lines = [line.partition("] ") for line in stdout.splitlines()]
    return {index.strip("["): json.loads(text) for index, _, text in lines}


@needs_two_cores
def test_a_plain_exec_inside_a_copy_runs_the_command_as_that_copy(tmp_path: Path) -> None:
    """A wrapper script in each copy of `hwtune exec --instances 2` runs `hwtune exec -- CMD`,
    and CMD's runs `hwtune exec` again. Before: the nested exec's plan (one instance on the
    CPUs the copy is bound to) replaced the copy's HWTUNE_INSTANCE(S) with 0 of 1, so both
    copies took themselves for instance 0. Each keeps its index and CPUs at the third level,
    and the marker still names exec's variables, so the next level knows them for exec's."""
    env = _env(tmp_path)
    nested = f"{PYTHON} -m hwtune exec -- {PYTHON} -m hwtune exec -- {PYTHON} -c {REPORT!r}"
    result = subprocess.run(
        [*HWTUNE, "exec", "--instances", "2", "--", "sh", "-c", nested],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    seen = _reports(result.stdout)
    assert sorted(seen) == ["0", "1"], result.stdout
    for index, report in seen.items():
        child_env = report["env"]
        assert (report["instance"], child_env["HWTUNE_INSTANCES"]) == (index, "2")
        assert hwtune_owned(child_env) >= {"HWTUNE_INSTANCE", "HWTUNE_INSTANCES"}
        planned = profile_for(PlanRequest(env, instances=2, instance=int(index)))
        if instance_pinning(planned.profile, planned.hardware).pinned:
            assert set(report["cpus"]) == set(planned.profile.instance.cpus)


# What exec gives copy 1 of 2 on a two-GPU node, left unpinned (--no-pin, or a tuned result).
_GPU_COPY = {
    "HWTUNE_INSTANCE": "1",
    "HWTUNE_INSTANCES": "2",
    "CUDA_VISIBLE_DEVICES": "GPU-bbb",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}


@needs_two_cores
def test_a_plain_exec_inside_a_copy_keeps_its_gpus_and_binding_and_a_count_wins(
    tmp_path: Path,
) -> None:
    """Before: the nested exec dropped the copy's GPU list (hwtune's own, and its plan sets
    none here) so the copy saw every GPU, and pinned the unpinned copy to slice 1 by its own
    rule. A count given there is a new launch: its copies are numbered 0 and 1 of 2 and
    pinned apart, inside the copy's GPUs, which that plan does not divide. A HWTUNE_INSTANCE
    the user exported, not exec (no marker), still asks for that slice, pinned."""
    env = {**_env(tmp_path), **_GPU_COPY, MARKER: marker_value(_GPU_COPY)}
    plain = _run_exec([], env)
    assert plain.returncode == 0, plain.stderr
    seen = json.loads(plain.stdout)
    child_env = seen["env"]
    assert {k: child_env.get(k) for k in _GPU_COPY} == _GPU_COPY
    assert hwtune_owned(child_env) >= set(_GPU_COPY)
    assert set(seen["cpus"]) == set(os.sched_getaffinity(0))
    counted = _run_exec(["--instances", "2"], env)
    assert counted.returncode == 0, counted.stderr
    copies = _reports(counted.stdout)
    assert sorted(copies) == ["0", "1"], counted.stdout
    for index, report in copies.items():
        child_env = report["env"]
        assert (child_env["HWTUNE_INSTANCE"], child_env["HWTUNE_INSTANCES"]) == (index, "2")
        assert child_env["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"
    planned = profile_for(PlanRequest(_env(tmp_path), instances=2, instance=1))
    if instance_pinning(planned.profile, planned.hardware).pinned:
        cpus = [set(copies[i]["cpus"]) for i in ("0", "1")]
        assert not cpus[0] & cpus[1], cpus
        users = _run_exec([], {**_env(tmp_path), "HWTUNE_INSTANCE": "1", "HWTUNE_INSTANCES": "2"})
        assert users.returncode == 0, users.stderr
        assert set(json.loads(users.stdout)["cpus"]) == set(planned.profile.instance.cpus)
