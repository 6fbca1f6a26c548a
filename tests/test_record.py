"""configure()'s record for verify: private, atomic, tied to one process, checked on read."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from hwtune.apply import record
from tests.apply_profiles import PYTHON
from tests.conftest import REPO


@pytest.mark.parametrize("umask", [0o022, 0o777])
def test_written_private_and_read_back(tmp_path: Path, umask: int) -> None:
    """0600 whatever the umask: under 0777 it was 0000, which verify could not read."""
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    old = os.umask(umask)
    try:
        path = record.write({"env": {"A": "1"}}, environ)
    finally:
        os.umask(old)
    assert path == str(tmp_path / "hwtune" / f"configure-{os.getpid()}.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "hwtune").st_mode) == 0o700
    assert [p.name for p in (tmp_path / "hwtune").iterdir()] == [Path(path).name]  # no temp
    data, why = record.read(os.getpid(), [environ])
    assert why == "" and data is not None and data["env"] == {"A": "1"}


def test_a_record_others_can_write_or_of_another_process_is_refused(tmp_path: Path) -> None:
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    path = Path(str(record.write({"env": {}}, environ)))
    path.chmod(0o666)
    data, why = record.read(os.getpid(), [environ])
    assert data is None and "not trusted" in why
    path.chmod(0o600)
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "start": "1"}))  # a recycled pid's old record
    data, why = record.read(os.getpid(), [environ])
    assert data is None and "earlier process" in why


def test_a_fallback_dir_that_is_not_ours_is_not_used(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / f"hwtune-{os.getuid()}").symlink_to(target)
    assert record.write({"env": {}}, {"TMPDIR": str(tmp_path)}) is None
    assert list(target.iterdir()) == []


def test_configure_leaves_a_record_and_removes_it_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    (tmp_path / "run").mkdir()  # the login made it; hwtune makes only its own level
    probe = (
        "import hwtune, json, os; r = hwtune.configure(tensorflow=False); "
        "from hwtune.apply.record import record_path; p = record_path(os.environ, os.getpid()); "
        "print(json.dumps([r.env_set, json.load(open(p))['env']]))"
    )
    out = subprocess.run(
        [PYTHON, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    env_set, recorded = json.loads(out.stdout)
    assert env_set and {k: recorded[k] for k in env_set} == env_set
    assert list((tmp_path / "run" / "hwtune").iterdir()) == []  # removed when it exited


POOL_WORKER_IMPORTS_TENSORFLOW = """
import multiprocessing, os, sys
import hwtune

def work(_):
    import tensorflow  # the stand-in package: configure()'s post-import hook fires here
    return os.getpid()

if __name__ == "__main__":
    hwtune.configure()  # TensorFlow not imported yet: a hook waits for it
    with multiprocessing.get_context("fork").Pool(2) as pool:
        workers = set(pool.map(work, range(4)))
    assert os.getpid() not in workers
    print(sorted(os.listdir(sys.argv[1])))
"""


def test_forked_pool_workers_leave_no_record(tmp_path: Path) -> None:
    """A pool worker forked after configure() inherits its import hook; importing TensorFlow
    there wrote configure-<worker pid>.json, and the worker leaves through os._exit, past the
    atexit that removes it, so every worker left a file behind. Only the process that called
    configure() records (and removes its record at exit)."""
    package = tmp_path / "site" / "tensorflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    run = tmp_path / "run"
    run.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        XDG_RUNTIME_DIR=str(run),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]),
        PYTHONWARNINGS="ignore",
    )
    script = tmp_path / "pool.py"
    script.write_text(POOL_WORKER_IMPORTS_TENSORFLOW)
    done = subprocess.run(
        [PYTHON, str(script), str(run / "hwtune")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("configure-") == 1  # the parent's own, while it runs
    assert list((run / "hwtune").iterdir()) == []  # and none once it exited


SLEEPER = (
    "import hwtune, os, sys, time; hwtune.configure(tensorflow=False); "
    "from hwtune.apply.record import record_path; "
    "print(record_path(os.environ, os.getpid()), flush=True); time.sleep(60)"
)


def test_a_record_left_by_a_signal_death_is_removed_by_the_next_configure(tmp_path: Path) -> None:
    """SIGTERM (scancel, docker stop) ends a job without atexit: its record stayed forever.
    The next configure() of the user removes it, and one naming a recycled pid, but not the
    record of a process still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    (tmp_path / "run").mkdir()
    killed = subprocess.Popen([PYTHON, "-c", SLEEPER], stdout=subprocess.PIPE, text=True, env=env)
    alive = subprocess.Popen([PYTHON, "-c", SLEEPER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert killed.stdout is not None and alive.stdout is not None
        killed_record = Path(killed.stdout.readline().strip())
        alive_record = Path(alive.stdout.readline().strip())
        killed.send_signal(signal.SIGTERM)
        assert killed.wait(timeout=30) == -signal.SIGTERM
        assert killed_record.exists()  # atexit did not run
        # a record naming a live pid (this one) with another start time: a recycled pid
        recycled = killed_record.with_name(f"configure-{os.getpid()}.json")
        namespace = os.readlink("/proc/self/ns/pid")
        recycled.write_text(
            json.dumps({"schema": 1, "pid": os.getpid(), "start": "1", "pid_namespace": namespace})
        )
        recycled.chmod(0o600)
        probe = "import hwtune; hwtune.configure(tensorflow=False)"
        subprocess.run([PYTHON, "-c", probe], env=env, timeout=120, check=True)
        assert not killed_record.exists()
        assert not recycled.exists()
        assert alive_record.exists()
    finally:
        for process in (killed, alive):
            process.kill()
            process.wait()
            assert process.stdout is not None
            process.stdout.close()


def test_a_record_of_another_pid_namespace_is_never_swept(tmp_path: Path) -> None:
    """A container sharing the runtime directory numbers its processes apart: its configure()
    found no /proc entry for a live host process's pid and removed that process's record."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to start a process in a new PID namespace")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(XDG_RUNTIME_DIR=str(tmp_path / "run"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    (tmp_path / "run").mkdir()
    host = subprocess.Popen([PYTHON, "-c", SLEEPER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert host.stdout is not None
        host_record = Path(host.stdout.readline().strip())
        # Its pid, gone in the new namespace (pid 1 there is the writer itself).
        probe = "from hwtune.apply import record; print(record.write({'env': {}}))"
        inside = subprocess.run(
            ["unshare", "-pf", "--mount-proc", PYTHON, "-c", probe],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if inside.returncode != 0:
            pytest.skip(f"unshare could not make a PID namespace here: {inside.stderr[-300:]}")
        assert inside.stdout.strip().endswith("configure-1.json"), inside.stdout
        assert host_record.exists()
    finally:
        host.kill()
        host.wait()
        assert host.stdout is not None
        host.stdout.close()


# A long-lived pool whose workers each call configure() (as an initializer) and are replaced
# after every task (maxtasksperchild=1); argv[1]: the record directory, argv[2]: the context.
POOL_WORKERS_CONFIGURE = """
import multiprocessing, os, sys
import hwtune

def start():
    hwtune.configure(tensorflow=False)

def task(_):
    return os.getpid()

if __name__ == "__main__":
    hwtune.configure(tensorflow=False)
    pool = multiprocessing.get_context(sys.argv[2]).Pool(2, initializer=start, maxtasksperchild=1)
    workers = set(pool.map(task, range(6), chunksize=1))
    pool.close()
    pool.join()
    print(len(workers), sorted(os.listdir(sys.argv[1])), flush=True)
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_pool_workers_that_configure_remove_their_records(tmp_path: Path, context: str) -> None:
    """A "fork" worker that called configure() leaves through os._exit, past atexit: its
    configure-<pid>.json stayed until the parent exited, one per worker the pool ever ran."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "TF_"))}
    env.update(
        XDG_RUNTIME_DIR=str(run),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        PYTHONPATH=str(REPO),
    )
    script = tmp_path / "pool.py"
    script.write_text(POOL_WORKERS_CONFIGURE)
    done = subprocess.run(
        [PYTHON, str(script), str(run / "hwtune"), context],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    count, _, left = done.stdout.strip().partition(" ")
    assert int(count) >= 3  # workers were replaced
    # While the parent runs, only its own record: each worker's went with it.
    assert left.count("configure-") == 1, left
    assert list((run / "hwtune").iterdir()) == []
