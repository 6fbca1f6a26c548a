"""What a new user's walkthrough found, end to end: real `python -m hwtune` subprocesses, real
files, the messages a user reads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, needs_two_cores


def environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No HWTUNE_* from the caller, a private config and state; `extra` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWTUNE_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_CACHE_HOME=str(tmp_path / "xdg-cache"),
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def hwtune(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwtune", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


NFD_DEFAULT_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
JOB = ("sh", "-c", "sleep 0.5; echo hwtune-metric: x=1")  # a tiny workload for `tune`


def test_tf_version_errors_name_their_source(tmp_path: Path) -> None:
    config = tmp_path / "xdg-config" / "hwtune" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('tf_version = "2.99"\n')
    result = hwtune("plan", env=environ(tmp_path))
    assert result.returncode == 1
    assert f"{config}: 'tf_version' = \"2.99\": hwtune knows TensorFlow" in result.stderr
    assert "--tf-version" not in result.stderr
    assert "hint: did you mean 2.21?" in result.stderr  # numerically nearest, not 2.19

    config.unlink()
    result = hwtune("plan", env=environ(tmp_path, HWTUNE_TF_VERSION="2.14"))
    assert result.returncode == 1
    assert "HWTUNE_TF_VERSION=2.14: hwtune knows TensorFlow" in result.stderr
    assert "--tf-version" not in result.stderr
    assert "hint: did you mean 2.15?" in result.stderr

    result = hwtune("plan", "--tf-version", "2.99", env=environ(tmp_path))
    assert "--tf-version 2.99: hwtune knows TensorFlow" in result.stderr

    result = hwtune("explain", "bazel.tf_version", env=environ(tmp_path, HWTUNE_TF_VERSION="2.19"))
    assert result.returncode == 0, result.stderr
    assert "TensorFlow 2.19, as asked (HWTUNE_TF_VERSION)" in result.stdout
    config.write_text('tf_version = "2.18"\n')
    result = hwtune("explain", "bazel.tf_version", env=environ(tmp_path))
    assert f"TensorFlow 2.18, as asked ('tf_version' in {config})" in result.stdout


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_tune_stopped_by_a_signal_says_what_it_found(
    tmp_path: Path, signum: int, status: int
) -> None:
    """SIGTERM and SIGHUP stop `hwtune tune` as Ctrl-C does: the trials so far and the fastest
    one, nothing stored. Its stderr is a pipe here, so each trial is one plain line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hwtune", "tune", "--budget", "120", "--name", "sig", "--", *JOB],
        env=environ(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        for line in proc.stderr:  # wait for the first trial's line, then stop it
            lines.append(line)
            if line.startswith("hwtune tune: trial 1 "):
                break
        proc.send_signal(signum)
        rest = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(lines) + (rest or "")
    assert proc.returncode == status, stderr
    assert "hwtune tune: trial 1 (" in stderr
    assert "hwtune tune: interrupted after " in stderr, stderr
    assert "(not confirmed, nothing stored)" in stderr
    stored = list(tmp_path.rglob("*.json"))
    assert stored == [], stored


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        (["--instances", "0"], "argument --instances: 0 is below the minimum 1"),
        (["--instance", "-1"], "argument --instance: '-1': expected a whole number"),
        (["--tf-version", "two"], "argument --tf-version: 'two' is not a TensorFlow version"),
    ],
)
def test_a_bad_planning_flag_is_named_once(tmp_path: Path, flag: list[str], said: str) -> None:
    """argparse names the flag, and the config's check named it again:
    `argument --instances: --instances: 0 is below the minimum 1`."""
    result = hwtune("plan", *flag, env=environ(tmp_path))
    assert result.returncode == 2
    assert said in result.stderr, result.stderr


def test_tune_help_writes_the_usage_docs_tune_md_shows(tmp_path: Path) -> None:
    """docs/tune.md: `[--max-repeats N] [--seed N]`; the help said MAX_REPEATS and SEED, with
    no default and no word that a race needs 2 rounds."""
    said = " ".join(hwtune("tune", "--help", env=environ(tmp_path)).stdout.split())
    assert "[--max-repeats N] [--seed N]" in said
    assert "rounds of trials per arm in a race, at least 2 (default 4)" in said


@needs_two_cores
def test_tune_mixed_alone_says_it_measures_the_cnn_only(tmp_path: Path) -> None:
    """builtin:mixed trains its MLP only in a second instance: `tune --workload builtin:mixed`
    without --instances 2 measured one CNN and said nothing of the MLP it names."""
    env = environ(tmp_path)
    alone = hwtune("tune", "--workload", "builtin:mixed", "--dry-run", env=env)
    assert alone.returncode == 0, alone.stderr
    assert "CNN alone (give --instances 2)" in alone.stderr
    two = hwtune("tune", "--workload", "builtin:mixed", "--instances", "2", "--dry-run", env=env)
    assert two.returncode == 0, two.stderr
    assert "CNN alone" not in two.stderr and "×2" in two.stdout


def test_doctor_on_a_job_that_exits_at_once_says_so(tmp_path: Path) -> None:
    result = hwtune("doctor", "--", "sh", "-c", "exit 3", env=environ(tmp_path))
    assert result.returncode == 1
    assert "the job exited (status 3) before TensorFlow started" in result.stderr
    assert "within" not in result.stderr  # it never waited the 120 s --startup


@pytest.mark.parametrize("flag", [["--wait"], ["--warmup", "1"], ["--startup", "30"]])
def test_doctor_pid_refuses_what_only_a_started_job_has(tmp_path: Path, flag: list[str]) -> None:
    """--wait, --warmup and --startup are the doctor's only when it starts the job; with --pid
    they were ignored without a word (`--pid N --wait` sampled 20 s and left)."""
    with subprocess.Popen(["sleep", "30"]) as job:
        try:
            result = hwtune("doctor", "--pid", str(job.pid), *flag, env=environ(tmp_path))
        finally:
            job.kill()
    assert result.returncode == 2, result.stderr
    assert f"{flag[0]} goes with -- CMD" in result.stderr


def test_doctor_pid_without_tensorflow_is_refused(tmp_path: Path) -> None:
    shell = subprocess.Popen(["sh", "-c", "sleep 60"])
    try:
        result = hwtune("doctor", "--pid", str(shell.pid), "--seconds", "1", env=environ(tmp_path))
    finally:
        shell.kill()
        shell.wait()
    assert result.returncode == 1, result.stdout
    assert f"no TensorFlow in pid {shell.pid} or below it" in result.stderr
    assert "bottleneck" not in result.stdout and "Python main thread" not in result.stdout


def test_doctor_pid_with_tensorflow_loaded_is_sampled(tmp_path: Path) -> None:
    """A process that mapped TensorFlow's library (here a stand-in file of that name) is
    sampled, even before its runtime's tf_ threads start."""
    library = tmp_path / "libtensorflow_framework.so.2"
    library.write_bytes(b"\0" * 4096)
    job = subprocess.Popen(
        [sys.executable, "-c", MAP_AND_WAIT, str(library)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and job.stdout.readline() == "mapped\n"
        result = hwtune("doctor", "--pid", str(job.pid), "--seconds", "1", env=environ(tmp_path))
    finally:
        job.kill()
        job.wait()
    assert result.returncode == 0, result.stderr
    assert "bottleneck" in result.stdout


MAP_AND_WAIT = """
import mmap, sys, time
with open(sys.argv[1], "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("mapped", flush=True)
time.sleep(60)
"""


def _daemon_nfd_line(tmp_path: Path, *args: str) -> str:
    """The first `nfd:` line a real daemon logs, then it is stopped."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hwtune", "daemon", "--output", str(tmp_path / "out"), *args],
        env=environ(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "nfd:" in line:
                return line
        raise AssertionError("the daemon ended without an nfd line")
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.skipif(os.path.isdir(NFD_DEFAULT_DIR), reason="NFD's features.d exists here")
def test_daemon_nfd_without_nfd_says_what_nfd_says(tmp_path: Path) -> None:
    line = _daemon_nfd_line(tmp_path, "--nfd")
    assert f"{NFD_DEFAULT_DIR} does not exist: Node Feature Discovery's worker is not" in line
    assert "--nfd-dir DIR" in line
    assert "temporary file" not in line and "previous file is intact" not in line


def test_daemon_nfd_dir_missing_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nfd" / "features.d"
    line = _daemon_nfd_line(tmp_path, "--nfd-dir", str(missing))
    assert f"--nfd-dir {missing}: does not exist" in line
    assert "previous file is intact" not in line


def test_a_failed_write_says_intact_only_when_a_file_was_there(tmp_path: Path) -> None:
    """The temporary file's longer name fails (ENAMETOOLONG) whoever runs the test."""
    from hwtune.errors import ApplyError
    from hwtune.fs.atomic import write_atomic

    target = tmp_path / ("x" * 250)
    with pytest.raises(ApplyError) as err:
        write_atomic(target, b"new")
    assert "there was no previous file, and none was written" in err.value.message
    assert "intact" not in err.value.message
    target.write_bytes(b"old")
    with pytest.raises(ApplyError) as err:
        write_atomic(target, b"new")
    assert "the previous file is intact" in err.value.message
    assert target.read_bytes() == b"old"


def _sparse_root(tmp_path: Path) -> Path:
    """A captured tree with only /proc/cpuinfo: detection falls back, and says so."""
    root = tmp_path / "tree"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_bytes(Path("/proc/cpuinfo").read_bytes())
    return root


def test_plan_from_a_hardware_file_points_at_its_issues(tmp_path: Path) -> None:
    detected = hwtune(
        "detect", "--root", str(_sparse_root(tmp_path)), "--json", env=environ(tmp_path)
    )
    model = tmp_path / "hw.json"
    model.write_text(detected.stdout)
    result = hwtune("plan", "--hardware", str(model), env=environ(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "planned with fallbacks; first: " in result.stderr
    assert f"(the `issues` list in {model} has them all)" in result.stderr
    assert "hwtune detect" not in result.stderr  # that shows this machine, not the file's


FALLBACKS = "warning: detection saw "


def test_apply_env_exec_warn_about_fallbacks_as_plan_does(tmp_path: Path) -> None:
    root = str(_sparse_root(tmp_path))
    listed = "planned with fallbacks; first: numa: "
    out = tmp_path / "out"
    applied = hwtune("apply", "--root", root, "--output", str(out), env=environ(tmp_path))
    assert applied.returncode == 0, applied.stderr
    assert f"hwtune apply: {FALLBACKS}" in applied.stderr and listed in applied.stderr
    assert f"`hwtune detect --root {root}` lists them" in applied.stderr
    assert (out / "hwtune.env").exists()

    printed = hwtune("env", "--root", root, env=environ(tmp_path))
    assert printed.returncode == 0, printed.stderr
    assert f"hwtune env: {FALLBACKS}" in printed.stderr
    assert "warning" not in printed.stdout  # stdout is eval'd
    assert "export " in printed.stdout

    ran = hwtune("exec", "--root", root, "--", "sh", "-c", "echo ran", env=environ(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "ran\n"
    assert f"hwtune exec: {FALLBACKS}" in ran.stderr


def test_apply_strict_writes_nothing_when_detection_saw_issues(tmp_path: Path) -> None:
    root = str(_sparse_root(tmp_path))
    out = tmp_path / "out"
    result = hwtune(
        "apply", "--root", root, "--output", str(out), "--strict", env=environ(tmp_path)
    )
    assert result.returncode == 3
    assert f"hwtune apply: {FALLBACKS}" in result.stderr
    assert not out.exists()


def test_the_configure_cache_carries_the_issues_for_env(tmp_path: Path) -> None:
    """`hwtune env` on this machine answers from the configure() cache: the payload keeps the
    issues so the warning is not lost there."""
    from hwtune.apply.cache import payload_from_planned
    from hwtune.pipeline.request import PlanRequest, profile_for

    planned = profile_for(PlanRequest(environ(tmp_path), root=str(_sparse_root(tmp_path))))
    count, first = payload_from_planned(planned)["detection_issues"]
    assert count == len(planned.hardware.issues) > 0 and first.startswith("numa: ")


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            "mode='fast'",
            "configure(mode=): 'fast' is not one of throughput, latency, batch); ",
        ),
        ("model='cnn'", "configure(model=): 'cnn' is not one of "),
        ("instances=0", "configure(instances=): 0 is below the minimum 1"),
        ("mode='latncy'", "(hint: did you mean 'latency'?)"),
    ],
)
def test_configure_names_its_keyword_arguments(tmp_path: Path, call: str, said: str) -> None:
    """The Python API has keyword arguments, not flags; the choices are said once."""
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c", f"import hwtune; hwtune.configure({call})"],
        env=environ(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "hwtune.configure: could not plan a profile (ConfigError: " in result.stderr
    assert said in result.stderr
    assert "--" not in result.stderr.split("ConfigError")[1]  # no flag named
    assert "hint: one of" not in result.stderr


@pytest.mark.parametrize(("job", "said"), [("true", "status 0"), ("false", "status 1")])
def test_verify_says_the_command_exited_and_how(tmp_path: Path, job: str, said: str) -> None:
    result = hwtune("verify", "--", job, env=environ(tmp_path))
    assert result.returncode == 1
    assert f"hwtune verify: error: {job} exited with {said} before it could be observed" in (
        result.stderr
    )


def test_verify_refuses_wait_without_pid(tmp_path: Path) -> None:
    result = hwtune("verify", "--wait", "2", "--", "true", env=environ(tmp_path))
    assert result.returncode == 2
    assert "--wait goes with --pid" in result.stderr


def test_verify_names_a_missing_pid(tmp_path: Path) -> None:
    missing = 2**22 + 1  # above pid_max's largest value (PID_MAX_LIMIT, 2**22)
    result = hwtune("verify", "--pid", str(missing), env=environ(tmp_path))
    assert result.returncode == 1
    assert f"hwtune verify: error: no such process: {missing}" in result.stderr


def test_the_undo_command_apply_prints_reverts_that_apply(tmp_path: Path) -> None:
    """apply's `undo with` hint named --output unquoted: pasted, `hwtune revert --output
    my out` was a usage error (a `;` in the name ran the rest as a command)."""
    out = tmp_path / "my out; x"
    done = hwtune("apply", "--output", str(out), env=environ(tmp_path))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("journal: "))
    undo = line[line.index("`") + 1 : line.rindex("`")]
    assert undo.startswith("hwtune revert --output "), line
    hwtune_cmd = f"{sys.executable} -m {undo}"
    reverted = subprocess.run(
        ["sh", "-c", hwtune_cmd],
        env=environ(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert reverted.returncode == 0, reverted.stderr
    assert f"reverted apply {line.split()[1]} in {out}" in reverted.stdout
    assert not (out / "hwtune.env").exists()
