"""hwtune verify: what /proc shows about a real process, compared with the profile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from hwtune.apply.render import env_map, thread_counts
from hwtune.apply.verify import (
    Check,
    Expectation,
    Observation,
    compare,
    descendants,
    observe,
    parse_numa_policy,
    render_table,
)
from hwtune.pipeline.request import PlanRequest, profile_for
from tests.apply_profiles import PYTHON
from tests.test_exec import needs_two_cores
from tests.test_runtime import needs_tf

HWTUNE = [PYTHON, "-m", "hwtune"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "SLURM_", "OMPI_", "TF_", "KMP_", "OMP_"))
    }
    env.update(
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        TF_CPP_MIN_LOG_LEVEL="3",
        **extra,
    )
    return env


def test_parsers() -> None:
    assert parse_numa_policy("7f00 bind:0 anon=1\n7f01 default\n") == "bind:0"


def test_compare_says_ok_different_and_cannot_tell() -> None:
    expected = Expectation(env={"A": "1", "B": "2"}, cpus=(0, 1), intra_op=2, inter_op=1)
    quiet = Observation(1, {"A": "1"}, (0,), Counter({"python": 1}), "python")
    checks = {c.setting: c.status for c in compare(expected, quiet)}
    assert checks == {
        "env A": "OK",
        "env B": "DIFFERENT",
        "CPU affinity": "DIFFERENT",
        "inter-op pool (tf_Compute threads)": "CANNOT TELL",
        "intra-op pool (unnamed threads)": "CANNOT TELL",
    }
    running = Observation(
        1, {"A": "1", "B": "2"}, (1, 0), Counter({"python": 4, "tf_Compute": 1}), "python"
    )
    assert {c.status for c in compare(expected, running)} == {"OK"}
    table = render_table(compare(expected, quiet))
    assert "env B" in table and "(unset)" in table and "DIFFERENT" in table


def test_descendants_and_observe_a_real_process(tmp_path: Path) -> None:
    child = subprocess.Popen(
        ["bash", "-c", "sleep 30 & wait"], env={"PATH": "/usr/bin:/bin", "MARK": "x y"}
    )
    try:
        for _ in range(50):
            tree = descendants(child.pid)
            if len(tree) == 2:
                break
            time.sleep(0.05)
        assert tree[0] == child.pid and len(tree) == 2
        seen = observe(tree[1])
        assert seen is not None and seen.environ["MARK"] == "x y" and seen.comm == "sleep"
        assert seen.cpus == tuple(sorted(os.sched_getaffinity(0)))
    finally:
        child.kill()
        child.wait()
    assert observe(child.pid) is None


SLEEPER = "import time; print('up', flush=True); time.sleep(60)"


def test_verify_pid_of_a_process_started_by_exec(tmp_path: Path) -> None:
    env = _env(tmp_path)
    child = subprocess.Popen(
        [*HWTUNE, "exec", "--", PYTHON, "-c", SLEEPER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        result = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(child.pid)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "env TF_NUM_INTRAOP_THREADS" in result.stdout and "CANNOT TELL" in result.stdout
        assert "DIFFERENT" not in result.stdout
    finally:
        child.kill()
        child.wait()


def test_verify_pid_of_a_shell_reports_the_shell_not_hwtune_or_a_sibling(
    tmp_path: Path,
) -> None:
    """`hwtune verify --pid $$` from a shell with a background job and no TensorFlow: the
    process named is the one reported, not hwtune itself (a child of that shell) or the job."""
    script = f"sleep 30 & {' '.join(HWTUNE)} verify --pid $$; status=$?; kill $!; exit $status"
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=_env(tmp_path), timeout=60
    )
    first = result.stdout.splitlines()[0]
    assert first.startswith("pid ") and "(bash)" in first, result.stdout + result.stderr


def test_verify_reports_a_difference(tmp_path: Path) -> None:
    env = _env(tmp_path)
    bad = {**env, "TF_NUM_INTEROP_THREADS": "999"}
    child = subprocess.Popen(
        [*HWTUNE, "exec", "--", PYTHON, "-c", SLEEPER],
        env=bad,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        result = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(child.pid), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert result.returncode == 5
        rows = {c["setting"]: c for c in json.loads(result.stdout)["checks"]}
        assert rows["env TF_NUM_INTEROP_THREADS"]["status"] == "DIFFERENT"
        assert rows["env TF_NUM_INTEROP_THREADS"]["actual"] == "999"
    finally:
        child.kill()
        child.wait()


def test_verify_needs_a_target(tmp_path: Path) -> None:
    result = subprocess.run(
        [*HWTUNE, "verify"], capture_output=True, text=True, env=_env(tmp_path), timeout=60
    )
    assert result.returncode == 2


TF_SCRIPT = textwrap.dedent(
    """
    import json, os, time
    import hwtune
    report = hwtune.configure()
    import tensorflow as tf
    tf.linalg.matmul(tf.ones((64, 64)), tf.ones((64, 64)))
    threading = tf.config.threading
    print(json.dumps({"set_by_configure": report.env_set, "user": list(report.env_user),
                      "intra": threading.get_intra_op_parallelism_threads(),
                      "inter": threading.get_inter_op_parallelism_threads()}), flush=True)
    time.sleep(3)   # let verify look at the running pools
    """
)


@needs_tf
def test_verify_a_tensorflow_job_under_exec(tmp_path: Path) -> None:
    """verify -- exec -- python: TF gets the plan through exec's environment and affinity,
    configure() inside finds nothing left to set and still sets tf.config, verify agrees."""
    env = _env(tmp_path)
    script = tmp_path / "job.py"
    script.write_text(TF_SCRIPT)
    result = subprocess.run(
        [*HWTUNE, "verify", "--", *HWTUNE, "exec", "--", PYTHON, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    job = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("{")))
    profile = profile_for(PlanRequest(env)).profile
    intra, inter = thread_counts(profile)
    assert job["set_by_configure"] == {} and job["user"] == []  # exec had set them all
    assert (job["intra"], job["inter"]) == (intra, inter)
    table = result.stdout[result.stdout.index("SETTING") :]
    for name in env_map(profile):
        assert any(
            line.startswith(f"env {name}") and line.rstrip().endswith("OK")
            for line in table.splitlines()
        )
    pool = next(line for line in table.splitlines() if line.startswith("inter-op pool"))
    assert pool.rstrip().endswith("OK") and f" {inter} " in pool


@pytest.mark.parametrize(("status", "verdict"), [(0, 0), (3, 1), (-9, 1)])
def test_verify_command_exit_status(tmp_path: Path, status: int, verdict: int) -> None:
    """A command killed by signal 9 was said to have "exited with status -9"."""
    end = f"exit({status})" if status >= 0 else f"os.kill(os.getpid(), {-status})"
    command = [
        *HWTUNE,
        "exec",
        "--",
        PYTHON,
        "-c",
        f"import os, time; time.sleep(3); {end}",
    ]
    result = subprocess.run(
        [*HWTUNE, "verify", "--", *command],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == verdict, result.stdout + result.stderr
    assert "DIFFERENT" not in result.stdout
    assert ("exited with status 3" in result.stderr) == (status == 3)
    assert ("the command was killed by signal 9" in result.stderr) == (status == -9)


def test_a_sigterm_to_verify_stops_the_command(tmp_path: Path) -> None:
    """`kill PID` of `hwtune verify -- CMD` (SIGTERM to verify alone) left CMD running,
    orphaned: the smoke test outlived the verify that started it."""
    verify = subprocess.Popen(
        [*HWTUNE, "verify", "--", PYTHON, "-c", "import time; time.sleep(120)"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(tmp_path),
    )
    children = Path(f"/proc/{verify.pid}/task/{verify.pid}/children")
    deadline = time.monotonic() + 60
    while not children.read_text().split():
        assert time.monotonic() < deadline, "verify never started the command"
        time.sleep(0.05)
    command = int(children.read_text().split()[0])
    verify.send_signal(signal.SIGTERM)
    status = verify.wait(30)
    try:
        os.kill(command, 0)  # reaped by verify: gone
    except ProcessLookupError:
        assert status == 128 + signal.SIGTERM
        return
    os.kill(command, signal.SIGKILL)
    pytest.fail(f"the command (pid {command}) outlived verify")


def test_verify_plain_command_lacks_the_profile(tmp_path: Path) -> None:
    result = subprocess.run(
        [*HWTUNE, "verify", "--", PYTHON, "-c", "import time; time.sleep(3)"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
    )
    assert result.returncode == 5 and "(unset)" in result.stdout


def test_a_configure_record_and_xla_threads_are_judged_as_what_they_are() -> None:
    expected = Expectation(env={"A": "1"}, inter_op=1)
    tf_threads = Counter({"python": 9, "tf_Compute": 2, "tf_XLAEigen": 2})
    # Started without A, set inside by configure(), which recorded it and the pool it set.
    record = {
        "env": {"A": "1"},
        "threads": {"inter_op": 1},
        "tensorflow": {"inter_op_parallelism_threads": "applied (1)"},
    }
    inside = Observation(1, {}, None, tf_threads, "python", record=record)
    rows = {c.setting: c for c in compare(expected, inside)}
    assert rows["env A"].status == "OK" and "record" in rows["env A"].note
    assert rows["inter-op pool (tf_Compute threads)"].status == "OK"
    # Without a record, XLA's own tf_Compute threads make the count say nothing exact.
    outside = Observation(1, {"A": "1"}, None, tf_threads, "python")
    rows = {c.setting: c for c in compare(expected, outside)}
    assert rows["inter-op pool (tf_Compute threads)"].status == "CANNOT TELL"
    # Without XLA, TF 2.21 under Keras's fit shows the pool and one more; a count beyond
    # that is a difference.
    keras = Observation(1, {"A": "1"}, None, Counter({"python": 3, "tf_Compute": 2}), "python")
    rows = {c.setting: c for c in compare(expected, keras)}
    assert rows["inter-op pool (tf_Compute threads)"].status == "OK"
    assert "one tf_Compute thread more" in rows["inter-op pool (tf_Compute threads)"].note
    plain = Observation(1, {"A": "1"}, None, Counter({"python": 3, "tf_Compute": 3}), "python")
    assert {c.status for c in compare(expected, plain)} == {"OK", "DIFFERENT"}
    # configure() recorded a value other than the plan: different, whatever /proc says.
    wrong = Observation(1, {"A": "1"}, None, Counter(), "python", record={"env": {"A": "7"}})
    assert compare(Expectation(env={"A": "1"}), wrong)[0].status == "DIFFERENT"
    unreadable = Observation(1, {}, None, Counter(), "python", record_note="not trusted")
    assert compare(Expectation(env={"A": "1"}), unreadable)[0].status == "CANNOT TELL"


def test_compute_pools_beyond_the_inter_op_pool_are_not_a_mismatch() -> None:
    # TF 2.21 runs 5 tf_Compute threads beyond the pool while Keras's fit runs (inter-op 1
    # showed 6 and inter-op 2 showed 7 inside fit's epochs, on a 2-vCPU EPYC VM): with the
    # variable as planned that is the pool plus other "Compute" pools, not a bigger pool.
    expected = Expectation(env={"TF_NUM_INTEROP_THREADS": "2"}, inter_op=2)
    fitting = Counter({"python": 9, "tf_Compute": 7, "tf_graph_runner": 1})
    row = "inter-op pool (tf_Compute threads)"

    def status(environ: dict[str, str], threads: Counter[str], **record: object) -> str:
        seen = Observation(1, environ, None, threads, "python", record=record or None)
        return {c.setting: c for c in compare(expected, seen)}[row].status

    assert status({"TF_NUM_INTEROP_THREADS": "2"}, fitting) == "OK"
    # configure() set the variable inside the process: its record is the evidence.
    assert status({}, fitting, env={"TF_NUM_INTEROP_THREADS": "2"}) == "OK"
    # The variable never reached the job, or asks for another pool: a difference.
    assert status({}, fitting) == "DIFFERENT"
    assert status({"TF_NUM_INTEROP_THREADS": "5"}, fitting) == "DIFFERENT"
    # Fewer threads than planned is never explained by other pools.
    fewer = Counter({"python": 9, "tf_Compute": 1})
    assert status({"TF_NUM_INTEROP_THREADS": "2"}, fewer) == "DIFFERENT"


# The README's job: Keras with XLA on or off, hwtune.configure() at start or not at all.
TRAIN = textwrap.dedent(
    """
    import sys, time
    if sys.argv[1] == "configure":
        import hwtune
        hwtune.configure()
    import tensorflow as tf
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8)])
    model.compile("sgd", "mse", jit_compile=sys.argv[2] == "on")
    model.fit(tf.random.normal((64, 4)), tf.random.normal((64, 8)), epochs=2, verbose=0)
    time.sleep(3)   # let verify look at the running pools
    """
)


@needs_tf
@pytest.mark.parametrize("xla", ["on", "off"])
@pytest.mark.parametrize("how", ["configure", "eval"])
def test_the_readme_verify_example_passes(tmp_path: Path, how: str, xla: str) -> None:
    """`hwtune verify -- python train.py` on a job that calls configure() and on one started
    with `eval "$(hwtune env)"`, with XLA on and off: nothing DIFFERENT, exit 0."""
    env = _env(tmp_path)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    hwtune = " ".join(HWTUNE)
    job = f"{hwtune} verify --json -- {PYTHON} {script} {how} {xla}"
    if how == "eval":
        job = f'eval "$({hwtune} env)"; {job}'
    result = subprocess.run(
        ["bash", "-c", job], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    shown = json.loads(result.stdout[result.stdout.index("{") :])
    rows = {c["setting"]: c for c in shown["checks"]}
    assert shown["configure_record"] == (how == "configure")
    planned = env_map(profile_for(PlanRequest(environ=env)).profile)
    for name in planned:
        assert rows[f"env {name}"]["status"] == "OK", rows[f"env {name}"]
    pool = rows["inter-op pool (tf_Compute threads)"]
    if how == "configure" or xla == "off":
        assert pool["status"] == "OK", pool
    else:
        assert pool["status"] in ("OK", "CANNOT TELL"), pool
    assert not [c for c in rows.values() if c["status"] == "DIFFERENT"]


@needs_two_cores
def test_verify_an_exec_rank_expects_the_pinning_rule(tmp_path: Path) -> None:
    """A rank `hwtune exec` started on its slice: verify expects the affinity exec gave it.
    Where the rule leaves copies unpinned (a tune result), no affinity is expected; before,
    verify wanted the slice's CPUs there and reported DIFFERENT."""
    from hwtune.apply.launch import instance_pinning

    env = _env(
        tmp_path,
        SLURM_LOCALID="1",
        SLURM_TASKS_PER_NODE="2(x2)",
        SLURM_NODEID="1",
        SLURM_STEP_ID="0",
    )
    job = [PYTHON, "-c", "import time; time.sleep(3)"]
    result = subprocess.run(
        [*HWTUNE, "verify", "--", *HWTUNE, "exec", "--", *job],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    planned = profile_for(PlanRequest(environ=_env(tmp_path), instances=2, instance=1))
    affinity = [x for x in result.stdout.splitlines() if x.startswith("CPU affinity")]
    if instance_pinning(planned.profile, planned.hardware).pinned:
        assert affinity and affinity[0].rstrip().endswith("OK"), result.stdout
    else:
        assert affinity == [], result.stdout
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]


def test_a_gpu_list_by_uuid_matches_the_planned_indices(tmp_path: Path) -> None:
    """`hwtune exec` names a copy's GPUs by UUID where the hardware knows them; the plan names
    them by index (in PCI order: CUDA_DEVICE_ORDER=PCI_BUS_ID). Before, verify compared the
    strings and reported DIFFERENT for every exec rank on a GPU node (seen on an H200). The
    T4 capture's real UUID; the A100 capture's UUID is another GPU's."""
    from hwtune.apply.launch import env_for_instance
    from hwtune.apply.verify import expected_for
    from hwtune.probes import detect
    from tests.gpu_roots import A100_MIG_XML, HASWELL, hardware, t4_under_cuda_11

    hw = detect(t4_under_cuda_11(tmp_path))
    planned = profile_for(PlanRequest({}, hardware=hw, instances=2, instance=1))
    expected = expected_for(planned)
    assert expected.env["CUDA_VISIBLE_DEVICES"] == "0"
    t4 = hw.gpus[0].uuid
    other = hardware(tmp_path, HASWELL, xml=A100_MIG_XML).gpus[0].uuid
    assert t4 and t4.startswith("GPU-") and other and other != t4
    # What exec gives the copy: every variable as planned, the GPU named by its UUID.
    given = env_for_instance(planned.profile, 1, hardware=hw)
    assert given["CUDA_VISIBLE_DEVICES"] == t4

    def check(gpus: str, **record: object) -> Check:
        environ = {**given, "CUDA_VISIBLE_DEVICES": gpus}
        seen = Observation(1, environ, None, Counter(), "python", record=record or None)
        rows = {c.setting: c for c in compare(expected, seen)}
        others = [c for c in rows.values() if c.setting.startswith("env ")]
        assert all(c.status == "OK" for c in others if "CUDA_VISIBLE" not in c.setting)
        return rows["env CUDA_VISIBLE_DEVICES"]

    by_uuid = check(t4)
    assert (by_uuid.status, by_uuid.actual, by_uuid.expected) == ("OK", t4, "0")
    assert "by UUID" in by_uuid.note
    by_index = check("0")
    assert (by_index.status, by_index.note) == ("OK", "")
    for wrong in (other, "1", f"0,{t4}"):
        assert check(wrong).status == "DIFFERENT", wrong
    # configure()'s record inside the process is judged the same way.
    recorded = check("", env={"CUDA_VISIBLE_DEVICES": t4})
    assert recorded.status == "OK" and "record" in recorded.note and "by UUID" in recorded.note
    assert check("", env={"CUDA_VISIBLE_DEVICES": other}).status == "DIFFERENT"


def test_a_long_executable_name_still_counts_its_unnamed_threads(tmp_path: Path) -> None:
    """The kernel cuts thread names to 15 bytes; psutil's name() is the full executable name
    (tensorflow_model_server): the pool check must compare the kernel's comm with itself."""
    exe = tmp_path / "a_very_long_python_name"
    exe.symlink_to(PYTHON)
    child = subprocess.Popen(
        [
            str(exe),
            "-c",
            "import threading, time\n"
            "for _ in range(3):\n"
            "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "print('up', flush=True)\n"
            "time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        seen = observe(child.pid)
        assert seen is not None and seen.comm == "a_very_long_pyt"
        assert seen.threads[seen.comm] >= 4
    finally:
        child.kill()
        child.wait()


# A multiprocessing "fork" pool worker of a program that ran configure() at the top, after
# (argv[1] == "after") or before its pool forked the worker, or never ("plain"); prints the
# worker's pid.
POOL_WORKER = """
import multiprocessing, os, sys, time
import hwtune
if sys.argv[1] == "after":
    hwtune.configure(tensorflow=False)
    # A start time is counted in clock ticks (proc(5): 1/100 s, cut down): a worker forked
    # within the tick configure() recorded in cannot be told from one forked before it.
    time.sleep(0.05)
pool = multiprocessing.get_context("fork").Pool(1)
worker = pool.apply(os.getpid)
if sys.argv[1] == "before":
    hwtune.configure(tensorflow=False)
print(worker, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("configured", ["after", "before", "plain"])
def test_a_worker_forked_after_configure_is_judged_by_its_parents_record(
    tmp_path: Path, configured: str
) -> None:
    """A worker forked after configure() holds what it set (os.environ is copied at fork),
    but /proc/PID/environ shows the program's start environment and a forked child writes no
    record: verify showed every variable "(unset)", CANNOT TELL, and named the parent to
    verify instead. It now judges the worker by the parent's record, and says so. A worker
    forked before configure() ran may not hold them (CANNOT TELL, as before); one of a
    process that never ran configure() is DIFFERENT."""
    env = _env(tmp_path, XDG_RUNTIME_DIR=str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    parent = subprocess.Popen(
        [PYTHON, "-c", POOL_WORKER, configured], env=env, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        result = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(worker)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        shown = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(worker), "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        rows = {c["setting"]: c for c in json.loads(shown.stdout)["checks"]}
        threads = rows["env TF_NUM_INTRAOP_THREADS"]
        if configured == "after":
            assert threads["status"] == "OK" and threads["actual"] != "(unset)", threads
            assert (
                f"left it in pid {parent.pid}, which this process was forked from"
                in (threads["note"])
            )
            assert json.loads(shown.stdout)["configure_record_of"] == parent.pid
            assert f"forked from pid {parent.pid} after its hwtune.configure()" in result.stdout
            assert result.returncode == 0, result.stdout + result.stderr
        elif configured == "before":
            assert (threads["actual"], threads["status"]) == ("(unset)", "CANNOT TELL")
            assert f"verify --pid {parent.pid}" in threads["note"]
            assert result.returncode != 5, result.stdout
        else:
            assert (threads["actual"], threads["status"]) == ("(unset)", "DIFFERENT")
            assert result.returncode == 5
    finally:
        os.kill(worker, signal.SIGKILL)
        parent.kill()
        parent.wait()


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK='x' is not a non-negative"),
        ({"HWTUNE_MDOE": "batch"}, "unknown variable HWTUNE_MDOE"),
    ],
)
def test_a_malformed_variable_of_the_job_is_named_as_the_jobs(
    tmp_path: Path, variables: dict[str, str], said: str
) -> None:
    """`LOCAL_RANK='x' is not a non-negative integer` did not say whose: verify's own
    environment has no LOCAL_RANK; the observed job's has."""
    env = _env(tmp_path)
    job = subprocess.Popen(
        [PYTHON, "-c", SLEEPER], env={**env, **variables}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and job.stdout.readline() == "up\n"
        result = subprocess.run(
            [*HWTUNE, "verify", "--pid", str(job.pid)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        job.kill()
        job.wait()
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"error: in the environment of pid {job.pid} (the job observed, not hwtune's own): "
        f"{said}" in result.stderr
    ), result.stderr
