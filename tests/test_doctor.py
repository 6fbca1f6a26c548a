"""The doctor's analysis, parsers and rendering, on sample sets recorded from real jobs.

tests/data/doctor/*.json are the "samples" of `hwtune doctor --json` on the jobs in
tests/doctor_jobs/ (input-bound, compute-bound, Python-bound, and the compute job with 2
intra-op threads in a 0.5-CPU cgroup v1 quota), recorded on a loaded 2-vCPU VM; the
settings check on a real process under taskset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hwtune.apply.verify import Check
from hwtune.doctor.analysis import analyse
from hwtune.doctor.metrics import TIMER_WAITS, measure
from hwtune.doctor.report import render_json, render_text
from hwtune.doctor.samples import CpuStat, GpuSample, Sample, SampleSet, ThreadSample
from hwtune.doctor.sampling import parse_cpu_stat, parse_thread_stat, read_threads
from hwtune.doctor.settings import settings_checks
from hwtune.doctor.signals import SignalReader, passes_on

DATA = Path(__file__).resolve().parent / "data" / "doctor"


def recorded(name: str) -> SampleSet:
    return SampleSet.from_dict(json.loads((DATA / f"{name}.json").read_text()))


@pytest.mark.parametrize("name", ["input", "compute", "python", "throttling"])
def test_recorded_jobs_get_their_verdict(name: str) -> None:
    diagnosis = analyse(recorded(name))
    assert diagnosis.bottleneck == name
    assert diagnosis.findings[0].evidence and diagnosis.findings[0].fix


def test_round_trip_keeps_the_verdict() -> None:
    data = recorded("input")
    again = SampleSet.from_dict(json.loads(json.dumps(data.as_dict())))
    assert again == data
    assert analyse(again).bottleneck == "input"


def _without_cgroup(data: SampleSet) -> SampleSet:
    return replace(data, samples=tuple(replace(s, cpu_stat=None) for s in data.samples))


def test_throttling_needs_the_cgroup_counters() -> None:
    data = recorded("throttling")
    m = measure(data)
    assert m is not None and m.throttled_share is not None and m.throttled_share >= 0.1
    # Without cpu.stat the same threads are a compute-bound job that wants more than its
    # budget (2 CPUs wanted against 1): oversubscribed, not throttled.
    diagnosis = analyse(_without_cgroup(data))
    ids = [f.id for f in diagnosis.findings]
    assert "throttled" not in ids and "oversubscribed" in ids


def test_rare_throttling_is_not_the_verdict() -> None:
    data = recorded("compute")
    n = len(data.samples)
    # 1 throttled period in 100 per second: below the 10% threshold.
    quiet = tuple(
        replace(s, cpu_stat=CpuStat(100 * i, i // 4, 1000 * i)) for i, s in enumerate(data.samples)
    )
    assert n > 4
    assert analyse(replace(data, samples=quiet)).bottleneck == "compute"
    busy = tuple(
        replace(s, cpu_stat=CpuStat(100 * i, 50 * i, 10**7 * i))
        for i, s in enumerate(data.samples)
    )
    assert analyse(replace(data, samples=busy)).bottleneck == "throttling"


def test_an_idle_gpu_is_the_verdict_and_names_the_cpu_side_cause() -> None:
    data = recorded("input")
    with_gpu = tuple(
        replace(s, gpus=(GpuSample(0, 30, 2 * 2**30, 16 * 2**30),)) for s in data.samples
    )
    diagnosis = analyse(replace(data, samples=with_gpu))
    assert diagnosis.bottleneck == "gpu-idle"
    assert "input pipeline" in diagnosis.findings[0].evidence
    busy_gpu = tuple(
        replace(s, gpus=(GpuSample(0, 95, 2 * 2**30, 16 * 2**30),)) for s in data.samples
    )
    assert analyse(replace(data, samples=busy_gpu)).bottleneck == "input"


def _synthetic(groups: dict[str, float], seconds: int = 4) -> SampleSet:
    """Threads named as TF names them, each wanting `rate` CPUs (all on a CPU)."""
    samples = []
    for t in range(seconds + 1):
        threads = tuple(
            ThreadSample(100 + i, name, "R", int(rate * 100 * t), int(rate * 1e9 * t), 0, "")
            for i, (name, rate) in enumerate(groups.items())
        )
        samples.append(Sample(float(t), threads))
    from hwtune.doctor.samples import Budget

    return SampleSet(100, "python", 100, Budget(4, "4 online CPUs"), tuple(samples))


def test_a_busy_private_tf_data_pool_is_input_bound() -> None:
    data = _synthetic({"python": 0.2, "tf_data_private": 2.0, "tf_Compute": 0.5})
    assert analyse(data).bottleneck == "input"
    # The same CPU on the compute pools is compute-bound.
    data = _synthetic({"python": 0.2, "tf_Compute": 2.5})
    assert analyse(data).bottleneck == "compute"


def _with_sleeper(data: SampleSet, ran: bool, wchan: str = "hrtimer_nanosleep") -> SampleSet:
    """`data` plus one thread in hrtimer_nanosleep (or `wchan`) in every sample, as Keras's fit
    starts one (53 µs of CPU since it started, on a 2-vCPU EPYC VM, TF 2.21); `ran`: it wakes
    and works."""
    samples = tuple(
        replace(
            s,
            threads=(
                *s.threads,
                ThreadSample(
                    999,
                    "python",
                    "S",
                    0,
                    53_529 + (i * 10**7 if ran else 0),
                    0,
                    wchan,
                ),
            ),
        )
        for i, s in enumerate(data.samples)
    )
    return replace(data, samples=samples)


# time.sleep's wait channel: hrtimer_nanosleep from Python 3.11 on, poll_schedule_timeout on
# 3.10 (a select() with no descriptors). On 3.10 tf.data's py_function runners sleeping in the
# input_bound job were not counted, and `hwtune doctor` said "unknown" instead of "input".
@pytest.mark.parametrize("wchan", ["hrtimer_nanosleep", "poll_schedule_timeout.constprop.0"])
def test_a_thread_parked_in_one_long_sleep_is_not_waiting_for_input(wchan: str) -> None:
    idle = _synthetic({"python": 0.05, "tf_Compute": 0.05})
    assert analyse(_with_sleeper(idle, ran=False, wchan=wchan)).bottleneck == "unknown"
    # The same sleeper waking to work between its sleeps is an input stage the compute waits on.
    assert analyse(_with_sleeper(idle, ran=True, wchan=wchan)).bottleneck == "input"


@pytest.mark.parametrize("wchan", ["sk_wait_data", "pipe_read", "unix_stream_read_generic"])
def test_a_reader_blocked_on_a_socket_or_pipe_waits_for_input_without_running(
    wchan: str,
) -> None:
    """Only a timer sleep needs CPU in the window to count: a thread blocked reading a socket or
    pipe for the whole window (a remote source that sends nothing) is the input stall itself.
    Before, it was dropped like Keras's parked nanosleep thread, and the job was "unknown"."""
    idle = _synthetic({"python": 0.05, "tf_Compute": 0.05})
    blocked = _with_sleeper(idle, ran=False, wchan=wchan)
    m = measure(blocked)
    assert m is not None and m.input_waiters == 1.0
    assert analyse(blocked).bottleneck == "input"
    parked = measure(_with_sleeper(idle, ran=False))
    assert parked is not None and parked.input_waiters == 0.0


# A process whose threads block, for as long as it lives, reading a Unix socket, a TCP socket
# and a pipe that nobody writes to, and one in a long time.sleep; "ready" once they are started.
BLOCKED_READERS = """
import os, socket, sys, threading, time
unix, unix_peer = socket.socketpair()  # every end kept open: a closed one reads as EOF
server = socket.create_server(("127.0.0.1", 0))
tcp = socket.create_connection(server.getsockname())
tcp_peer, _ = server.accept()
pipe, pipe_writer = os.pipe()
for read in (lambda: unix.recv(1), lambda: tcp.recv(1), lambda: os.read(pipe, 1)):
    threading.Thread(target=read, daemon=True).start()
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


def test_real_threads_blocked_on_sockets_and_a_pipe_wait_for_input() -> None:
    """The same on a real process, sampled from /proc as the doctor does: the three readers
    use no CPU in the window and count, the thread in a long sleep does not."""
    import os
    import subprocess
    import sys
    import time

    from hwtune.doctor.samples import Budget

    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_READERS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 30
        while True:  # until every thread but the main one sleeps where it will stay
            threads = read_threads(child.pid) or ()
            asleep = [t for t in threads if t.tid != child.pid and t.state == "S"]
            if len(asleep) == 4 and not any("futex" in t.wchan for t in asleep):  # not the GIL
                break
            assert time.monotonic() < deadline, threads
            time.sleep(0.05)
        if not any(w in t.wchan for t in asleep for w in TIMER_WAITS):  # time.sleep's
            pytest.skip(f"this kernel does not name wait channels ({asleep[0].wchan!r})")
        samples = []
        for _ in range(5):
            samples.append(Sample(time.monotonic(), read_threads(child.pid) or ()))
            time.sleep(0.1)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    clock_ticks = os.sysconf("SC_CLK_TCK")
    data = SampleSet(child.pid, "python", clock_ticks, Budget(1, "test"), tuple(samples))
    m = measure(data)
    assert m is not None and m.input_waiters == 3.0, [t.wchan for t in samples[-1].threads]


def test_an_idle_job_is_unknown_and_says_so() -> None:
    diagnosis = analyse(_synthetic({"python": 0.05, "tf_Compute": 0.05}))
    assert diagnosis.bottleneck == "unknown"
    assert any("nothing stands out" in n for n in diagnosis.notes)


def test_one_sample_is_unknown() -> None:
    data = recorded("compute")
    diagnosis = analyse(replace(data, samples=data.samples[:1]))
    assert diagnosis.bottleneck == "unknown" and diagnosis.metrics is None


def test_settings_that_differ_become_a_finding() -> None:
    checks = [
        Check("env TF_NUM_INTRAOP_THREADS", "2", "(unset)", "DIFFERENT"),
        Check("CPU affinity", "0-1", "0-1", "OK"),
    ]
    diagnosis = analyse(recorded("compute"), checks)
    found = [f for f in diagnosis.findings if f.id == "settings-not-applied"]
    assert len(found) == 1 and "1 of 2" in found[0].finding
    assert "TF_NUM_INTRAOP_THREADS" in found[0].evidence
    assert not [f for f in analyse(recorded("compute"), checks[1:]).findings if "settings" in f.id]


def test_thread_stat_with_parentheses_in_the_name() -> None:
    line = "4242 (a) (b) c) S 1 1 1 0 -1 4194304 1 0 0 0 250 17 0 0 20 0 1 0 1 1 1\n"
    thread = parse_thread_stat(4242, line)
    assert thread is not None
    assert (thread.comm, thread.state, thread.cpu_ticks) == ("a) (b) c", "S", 267)
    assert parse_thread_stat(1, "garbage") is None


def test_cpu_stat_v1_and_v2() -> None:
    v1 = "nr_periods 57\nnr_throttled 19\nthrottled_time 812345678\nnr_bursts 0\n"
    assert parse_cpu_stat(v1) == CpuStat(57, 19, 812345678)
    v2 = "usage_usec 10\nuser_usec 5\nnr_periods 10\nnr_throttled 4\nthrottled_usec 7\n"
    assert parse_cpu_stat(v2) == CpuStat(10, 4, 7000)
    assert parse_cpu_stat("usage_usec 10\n") is None


def test_read_threads_of_this_process() -> None:
    import os

    threads = read_threads(os.getpid())
    assert threads is not None
    assert any(t.tid == os.getpid() for t in threads)
    assert read_threads(2**22 + 1) is None  # above pid_max's ceiling: never a process


def test_a_zombie_counts_as_ended() -> None:
    """Exited but not reaped (a launcher that has not waited yet): /proc still lists it, in
    state Z; sampling it for the whole window would report "nothing stands out"."""
    import os
    import subprocess
    import sys
    import time

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        assert read_threads(child.pid) is None
        assert read_threads(os.getpid()) is not None
    finally:
        child.wait()


def test_signals_from_tensorflow_output() -> None:
    reader = SignalReader()
    for line in (
        "I0000 00:00:1.2 1 port.cc:153] oneDNN custom operations are on. You may see ...\n",
        "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost\n",
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,inner_product,x64:gemm:jit,...\n",
        "I0000 00:00:1.3 2 device_compiler.h:208] Compiled cluster using XLA!  This line...\n",
    ):
        reader.feed(line)
    signals = reader.signals
    assert signals["onednn_opts"] == "on" and signals["onednn_primitives"] == "1"
    assert signals["onednn_kinds"] == "inner_product" and signals["xla"] == "compiled"
    assert not passes_on("onednn_verbose,v1,info\n", verbose_ours=True)
    assert passes_on("onednn_verbose,v1,info\n", verbose_ours=False)
    ids = [f.id for f in analyse(replace(recorded("compute"), signals=signals)).findings]
    assert "onednn-in-use" in ids and "xla-in-use" in ids


def test_reports() -> None:
    data = recorded("throttling")
    diagnosis = analyse(data)
    text = render_text(diagnosis, data)
    assert text.startswith(f"pid {data.pid} (python): bottleneck: throttling")
    assert "CFS throttling:" in text and "evidence" in text and "fix" in text
    doc = json.loads(render_json(diagnosis, data))
    assert doc["bottleneck"] == "throttling"
    assert {"finding", "evidence", "fix"} <= set(doc["findings"][0])
    assert SampleSet.from_dict(doc["samples"]) == data


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor"],
        ["doctor", "--pid", "1", "--", "true"],
        ["doctor", "--seconds", "0", "--", "true"],
        ["doctor", "--warmup", "-1", "--", "true"],
        # past time_t: time.sleep(1e300) after TensorFlow started was an OverflowError
        ["doctor", "--warmup", "1e300", "--", "true"],
        ["doctor", "--seconds", "1e300", "--", "true"],
        ["doctor", "--startup", "1e300", "--", "true"],
    ],
)
def test_bad_usage_exits_2(cli, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    result = cli(argv)
    assert result.exit_status == 2
    assert "hwtune doctor: error:" in result.stderr  # after the usage line for a bad value


def test_a_missing_pid_is_one_line(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(["doctor", "--pid", str(2**22 + 1)])
    assert result.exit_status == 1
    assert result.stderr.splitlines()[0] == f"hwtune doctor: error: no process {2**22 + 1}"


def test_a_job_without_tensorflow_is_reported(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(["doctor", "--startup", "1", "--", "sh", "-c", "exit 3"])
    assert result.exit_status == 1
    assert "the job exited (status 3) before TensorFlow started" in result.stderr


class _Nvml:
    """The NVML calls the doctor makes, for two GPUs; the second one is lost (its calls raise
    the real pynvml.NVMLError, as a GPU that fell off the bus does)."""

    def __init__(self) -> None:
        import pynvml

        self.error = pynvml.NVMLError
        self.shut = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        if handle == 1:
            raise self.error(15)  # NVML_ERROR_GPU_IS_LOST
        return type("Rates", (), {"gpu": 42, "memory": 10})()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("Memory", (), {"used": 2**30, "total": 16 * 2**30})()


def test_gpu_samples_skip_a_lost_gpu() -> None:
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    from hwtune.doctor.gpu import GpuSampler

    lib = _Nvml()
    sampler = GpuSampler(library=lib)
    assert sampler.available
    assert sampler.sample() == (GpuSample(0, 42, 2**30, 16 * 2**30),)
    sampler.close()
    assert lib.shut and not sampler.available and sampler.sample() == ()


def test_step_ends_give_a_median_and_reach_the_lead_finding() -> None:
    from hwtune.apply.steps import parse_steps
    from hwtune.doctor.watch import steps_in_window

    data = replace(recorded("compute"), origin=1000.0)
    stamps = parse_steps("999.5\n1000.5\n1000.7\n1001.1\n1001.2\n1001.2x\n99999\n")
    assert stamps == [999.5, 1000.5, 1000.7, 1001.1, 1001.2, 99999.0]
    ends = steps_in_window(stamps, data)  # before the window and after it are left out
    assert ends == pytest.approx((0.5, 0.7, 1.1, 1.2))
    diagnosis = analyse(replace(data, steps=ends))
    assert diagnosis.metrics is not None and diagnosis.metrics.steps == 4
    assert diagnosis.metrics.step_median_s == pytest.approx(0.2)
    assert "4 training steps, median 200.0 ms" in diagnosis.findings[0].evidence
    assert analyse(data).metrics.step_median_s is None  # type: ignore[union-attr]


def test_a_command_that_cannot_run_is_one_line(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = str(tmp_path / "no-such-program")
    result = cli(["doctor", "--", missing])
    assert result.exit_status == 1
    assert result.stderr.splitlines()[0].startswith(
        f"hwtune doctor: error: cannot run '{missing}'"
    )


def test_an_idle_gpu_without_a_cpu_cause_names_launch_overhead() -> None:
    data = recorded("compute")
    with_gpu = tuple(replace(s, gpus=(GpuSample(0, 50, 2**30, 2**34),)) for s in data.samples)
    lead = analyse(replace(data, samples=with_gpu)).findings[0]
    assert lead.id == "gpu-idle" and "on the CPU side" not in lead.evidence
    assert lead.fix.startswith("feed the GPU") and "steps_per_execution" in lead.fix


def test_wanting_twice_the_quota_is_throttling_without_the_counters() -> None:
    # A busy machine keeps a job below its 0.5-CPU quota, so the kernel seldom throttles it;
    # its threads still want 1.2 CPUs, more than twice what the quota allows.
    from hwtune.doctor.samples import Budget

    data = _synthetic({"python": 0.1, "tf_Compute": 0.1, "worker": 1.0})
    quota = replace(data, budget=Budget(1, "cgroup quota 0.5 CPUs", quota=0.5))
    diagnosis = analyse(quota)
    assert diagnosis.bottleneck == "throttling"
    assert diagnosis.findings[0].id == "oversubscribed"
    assert "0.5-CPU cgroup quota" in diagnosis.findings[0].evidence
    # The same threads with a whole CPU and no quota are compute-bound.
    assert analyse(replace(data, budget=Budget(1, "1 online CPU"))).bottleneck == "compute"


def test_a_job_that_ends_mid_window_is_said_to_have_ended(
    cli,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job that exits 1 s into a 4 s window: the report covers that second, and says so
    (it read "sampled 1.0 s" with no word that the job had ended)."""
    import subprocess
    import sys

    from hwtune.doctor import watch

    job = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 1\nwhile time.time() < end: pass"]
    )
    try:
        # The sampler, the analysis and the report are the real ones; only "which process
        # loaded TensorFlow" is answered for this job, which loads none.
        monkeypatch.setattr(watch, "tensorflow_target", lambda pid: pid)
        result = cli(["doctor", "--pid", str(job.pid), "--seconds", "4"])
    finally:
        job.kill()
        job.wait()
    assert result.exit_status == 0, result.stderr
    assert f"pid {job.pid} ended" in result.stderr
    assert "s into the 4 s window: the figures cover that part only" in result.stderr


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None,
    reason="needs two CPUs in this process's affinity and taskset (util-linux)",
)
def test_settings_are_planned_for_the_jobs_own_affinity(tmp_path: Path) -> None:
    """A job under `taskset -c 0` whose configure() planned for CPU 0 got its settings: the
    doctor planned from its own /proc/self (every CPU) and reported the job's affinity and
    thread variables as settings that did not take effect."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    (tmp_path / "run").mkdir()
    env.update(
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    code = "import hwtune, time; hwtune.configure(tensorflow=False); print('up', flush=True); "
    code += "time.sleep(60)"
    job = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert job.stdout is not None
        assert job.stdout.readline() == "up\n"
        checks = {c.setting: c for c in settings_checks(job.pid)}
        assert checks["CPU affinity"].status == "OK", checks["CPU affinity"]
        assert not [c for c in checks.values() if c.status == "DIFFERENT"], checks
    finally:
        job.kill()
        job.wait()
        assert job.stdout is not None
        job.stdout.close()
