"""Hostile caches and tuned results: files hwtune wrote earlier, replaced by someone else.

hwtune runs as root (`hwtune apply`, the daemon, Slurm prologs) and every job start reads the
configure cache (`hwtune env`, `hwtune.configure()`). What is at those paths is input: here it
is planted with variables that load code, made a FIFO (which used to hang every job start),
/dev/zero (unbounded memory), a link, a huge or deeply nested file, or a file another user
owns or can write. Every case must end in a plan made without it, a warning naming the file,
and (for the cache) a rebuilt regular file: never a hang, a traceback or a planted variable.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

from .conftest import REPO_ROOT, Figures, require_root

NOBODY = 65534
# Variables that load code or move output, which a planted tuned result used to set for every
# job (`hwtune apply` wrote them into hwtune.env and hwtune.sh).
PLANTED = {
    "CUDA_INJECTION64_PATH": "/tmp/inject.so",
    "OMP_TOOL_LIBRARIES": "/tmp/tool.so",
    "NCCL_NET_PLUGIN": "/tmp/plugin",
    "GLIBC_TUNABLES": "glibc.malloc.check=3",
    "XLA_FLAGS": "--xla_dump_to=/tmp/dump",
    "HOME": "/tmp/elsewhere",
    "LD_PRELOAD": "/tmp/evil.so",
}
FILE_KINDS = ("symlink", "fifo", "dev-zero", "world-writable", "group-writable", "foreign-owner")


def _environ(tmp_path: Path) -> dict[str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HWTUNE_", "XDG_", "SLURM_", "OMPI_", "PMI_", "MPI_"))
        and k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE")
    }
    environ.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        HWTUNE_TUNED_DIR=str(tmp_path / "tuned"),
        PYTHONPATH=str(REPO_ROOT),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    return environ


def _make_hostile(path: Path, kind: str, text: str, scratch: Path) -> None:
    """Put `kind` at `path`; `text` is what a planted file says. Skips where the kind needs
    root (another owner, a device node) and this is not root."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "symlink":
        target = scratch / "planted-target.json"
        target.write_text(text)
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        require_root()
        try:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's numbers
        except PermissionError:
            pytest.skip("no CAP_MKNOD here: a device node cannot be made")
    else:
        path.write_text(text)
        os.chmod(path, {"world-writable": 0o646, "group-writable": 0o664}.get(kind, 0o644))
        if kind == "foreign-owner":
            require_root()
            os.chown(path, NOBODY, NOBODY)


# -- tuned results ------------------------------------------------------------------------


def _tuned_record(fingerprint: str, **settings: object) -> dict[str, object]:
    return {
        "schema": 1,
        "fingerprint": fingerprint,
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "settings": {"threads.intra_op": 1, "instances": 1, **settings},
    }


@pytest.mark.parametrize("case", [*(f"sets {name}" for name in PLANTED), *FILE_KINDS])
def test_hostile_tuned_result(
    case: str, machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """`hwtune apply` (as root in production) plans with the rules, warns naming the file, and
    writes none of the planted variables."""
    environ = _environ(tmp_path)
    root = ["--root", str(machine_snapshot)]
    fingerprint = json.loads(run_cli(["plan", *root, "--json"], environ).stdout)["fingerprint"]
    target = tmp_path / "tuned" / fingerprint / "builtin_cnn.json"
    planted: dict[str, str] = {}
    target.parent.mkdir(parents=True)
    if case.startswith("sets "):
        name = case.removeprefix("sets ")
        planted = {name: PLANTED[name]}
        record = _tuned_record(fingerprint, **{f"env.{name}": PLANTED[name]})
        target.write_text(json.dumps(record))
        os.chmod(target, 0o644)
    else:  # a result as the tuner writes it, in a file that cannot be trusted
        _make_hostile(target, case, json.dumps(_tuned_record(fingerprint)), tmp_path)
    # A result applies only to the workload named (issue 12): name it, so it is read.
    out = ["--output", str(tmp_path / "out")]
    applied = run_cli(["apply", *root, "--workload", "builtin:cnn", *out], environ)
    assert applied.exit_status == 0, applied.stderr
    assert "Traceback" not in applied.stderr
    said = applied.stdout + applied.stderr
    assert "tuned results ignored" in said and str(target) in said, said[-2000:]
    written = (tmp_path / "out" / "hwtune.env").read_text()
    for name, value in planted.items():
        assert f"{name}=" not in written and value not in written, written
    profile = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert profile["threads"]["intra_op"]["source"] != "measured"
    figures.count("applied with the rules, a warning naming the file")


# -- the configure cache ------------------------------------------------------------------


def _hwtune_env(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwtune", "env", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,  # a FIFO used to hang here forever
        env=environ,
        cwd=REPO_ROOT,
    )


CACHE_CASES = (*FILE_KINDS, "oversized", "nested-200k")


@pytest.mark.parametrize("case", CACHE_CASES)
def test_hostile_configure_cache(case: str, tmp_path: Path, figures: Figures) -> None:
    """A cache that says LD_PRELOAD (with the right fingerprint, so it would be used) and is
    not trustworthy, or is no file at all: `hwtune env` finishes, prints no planted variable,
    warns where the file was refused, and leaves a regular file of its own."""
    environ = _environ(tmp_path)
    first = _hwtune_env(environ)
    assert first.returncode == 0, first.stderr
    cache = tmp_path / "cache" / "hwtune" / "configure-default.json"
    data = json.loads(cache.read_text())
    data["payload"]["env"].append(["LD_PRELOAD", "/tmp/evil.so", "planted", "user"])
    planted = json.dumps(data)
    if case == "oversized":  # valid JSON, padded past the cap
        cache.write_text(planted[:-1] + ', "pad": "' + "x" * (2 << 20) + '"}')
    elif case == "nested-200k":
        cache.write_text("[" * 200_000)
    else:
        _make_hostile(cache, case, planted, tmp_path)
    done = _hwtune_env(environ)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "LD_PRELOAD" not in json.loads(done.stdout)
    if case not in ("nested-200k",):  # a damaged file is only a miss; a refused one is said
        assert "configure cache was ignored and rebuilt" in done.stderr, done.stderr
        assert str(cache) in done.stderr
    info = os.lstat(cache)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) & 0o022 == 0
    assert "LD_PRELOAD" not in cache.read_text()
    figures.count("ignored, rebuilt as a regular file of this user's")
