"""The configure cache and tuned results are input, not trust (issue 15, item 4).

Real files, FIFOs, devices and owners: a file another user wrote (or could write) is ignored,
a FIFO never hangs a job start, a device never costs unbounded memory, and a tuned result sets
only the knobs the tuner searches.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hwtune.errors import TuneError
from hwtune.fs.trusted_read import RefusedFile, read_bounded
from hwtune.models.profile import Setting
from hwtune.pipeline.measured import (
    find_result,
    measured_settings,
    read_result,
    result_path,
    save_result,
)
from tests.conftest import isolated_environ

NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="changing a file's owner to another user needs root"
)


def _nobody_owns(path: Path) -> None:
    os.chown(path, NOBODY, NOBODY)


# -- the reader ---------------------------------------------------------------------------


def test_read_bounded_reads_a_trusted_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    os.chmod(path, 0o644)
    assert read_bounded(path, 5, check_owner=True) == b"hello"
    with pytest.raises(RefusedFile, match="larger than 4 bytes"):
        read_bounded(path, 4, check_owner=True)
    with pytest.raises(RefusedFile) as missing:
        read_bounded(tmp_path / "absent", 5, check_owner=True)
    assert missing.value.missing


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("fifo", "a named pipe"),
        ("symlink", "a symbolic link"),
        ("directory", "a directory"),
        ("group-writable", "writable by its group"),
        ("world-writable", "writable by others"),
    ],
)
def test_read_bounded_refuses(kind: str, why: str, tmp_path: Path) -> None:
    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking open would wait forever
    elif kind == "symlink":
        (tmp_path / "target").write_text("{}")
        path.symlink_to(tmp_path / "target")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text("{}")
        os.chmod(path, 0o664 if kind == "group-writable" else 0o646)
    with pytest.raises(RefusedFile) as refused:
        read_bounded(path, 1 << 20, check_owner=True)
    assert str(path) in refused.value.message and why in refused.value.message
    assert not refused.value.missing


def test_read_bounded_refuses_dev_zero(tmp_path: Path) -> None:
    """/dev/zero never ends: refused as a device, not read until memory runs out."""
    with pytest.raises(RefusedFile, match="a character device"):
        read_bounded("/dev/zero", 1 << 20, check_owner=False)


@needs_root
def test_read_bounded_refuses_another_users_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("{}")
    os.chmod(path, 0o644)
    _nobody_owns(path)
    with pytest.raises(RefusedFile, match=f"owned by uid {NOBODY}"):
        read_bounded(path, 1 << 20, check_owner=True)
    assert read_bounded(path, 1 << 20, check_owner=False) == b"{}"


# -- the configure cache ------------------------------------------------------------------


def _hwtune_env(environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwtune", "env", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
    )


def _cache_file(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "hwtune" / "configure-default.json"


def _plant_preload(cache: Path) -> None:
    """Add LD_PRELOAD to a real cache file, keeping its fingerprint (so it would be used)."""
    data = json.loads(cache.read_text())
    data["payload"]["env"].append(["LD_PRELOAD", "/tmp/planted.so", "planted", "user"])
    cache.write_text(json.dumps(data))


def test_a_fifo_at_the_cache_path_does_not_hang_hwtune_env(tmp_path: Path) -> None:
    """Before: `hwtune env` opened the FIFO and waited for a writer forever."""
    environ = isolated_environ(tmp_path)
    cache = _cache_file(tmp_path)
    cache.parent.mkdir(parents=True)
    os.mkfifo(cache)
    done = _hwtune_env(environ)
    assert done.returncode == 0, done.stderr
    assert "configure cache was ignored and rebuilt" in done.stderr
    assert "a named pipe" in done.stderr and str(cache) in done.stderr
    assert stat.S_ISREG(os.lstat(cache).st_mode)  # rebuilt as a regular file
    again = _hwtune_env(environ)
    assert again.returncode == 0 and "warning" not in again.stderr


def test_a_cache_writable_by_others_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    environ = isolated_environ(tmp_path)
    assert _hwtune_env(environ).returncode == 0  # makes the cache
    cache = _cache_file(tmp_path)
    _plant_preload(cache)
    os.chmod(cache, 0o666)
    done = _hwtune_env(environ)
    assert done.returncode == 0, done.stderr
    assert "LD_PRELOAD" not in json.loads(done.stdout)
    assert "writable by others" in done.stderr
    assert stat.S_IMODE(os.lstat(cache).st_mode) == 0o644
    assert "LD_PRELOAD" not in cache.read_text()


@needs_root
def test_another_users_cache_is_ignored_by_configure(tmp_path: Path) -> None:
    """configure() (every job start) neither uses nor keeps a cache file another user owns."""
    environ = isolated_environ(tmp_path)
    assert _hwtune_env(environ).returncode == 0
    cache = _cache_file(tmp_path)
    _plant_preload(cache)
    _nobody_owns(cache)
    probe = (
        "import hwtune, json, warnings; r = hwtune.configure(tensorflow=False); "
        "print(json.dumps([r.cached, 'LD_PRELOAD' in r.env_set, r.notes]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        check=True,
    )
    cached, preloaded, notes = json.loads(done.stdout)
    assert cached is False and preloaded is False
    assert any(f"owned by uid {NOBODY}" in note for note in notes), notes
    assert os.lstat(cache).st_uid == 0


@needs_root
def test_a_device_at_the_cache_path_is_not_read(tmp_path: Path) -> None:
    """A /dev/zero node (major 1, minor 5) at the cache path: never read, so memory stays
    bounded; the cache is rebuilt as a regular file."""
    environ = isolated_environ(tmp_path)
    cache = _cache_file(tmp_path)
    cache.parent.mkdir(parents=True)
    try:
        os.mknod(cache, stat.S_IFCHR | 0o644, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("this container may not create device nodes (no CAP_MKNOD)")
    done = _hwtune_env(environ)
    assert done.returncode == 0, done.stderr
    assert "a character device" in done.stderr
    assert stat.S_ISREG(os.lstat(cache).st_mode)


# -- tuned results ------------------------------------------------------------------------


def _record(**settings: object) -> dict[str, object]:
    return {
        "schema": 1,
        "fingerprint": "abc123",
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "settings": settings,
    }


def load_measured(
    fingerprint: str, workload: str, *, environ: dict[str, str]
) -> dict[str, Setting]:
    """The settings planning takes from the stored result (as pipeline/request.py loads it)."""
    path = find_result(fingerprint, workload, environ=environ)
    assert path is not None
    return measured_settings(read_result(path))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_INJECTION64_PATH", "/tmp/inject.so"),
        ("OMP_TOOL_LIBRARIES", "/tmp/tool.so"),
        ("NCCL_NET_PLUGIN", "/tmp/plugin"),
        ("GLIBC_TUNABLES", "glibc.malloc.check=3"),
        ("XLA_FLAGS", "--xla_dump_to=/tmp/dump"),
        ("HOME", "/tmp/elsewhere"),
        ("KMP_BLOCKTIME", "0"),
        ("LD_PRELOAD", "/tmp/evil.so"),
    ],
)
def test_a_tuned_result_sets_only_the_knobs_the_tuner_searches(
    name: str, value: str, tmp_path: Path
) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(_record(**{"threads.intra_op": 1, f"env.{name}": value}), environ)
    with pytest.raises(TuneError) as refused:
        load_measured("abc123", "builtin:cnn", environ=environ)
    assert str(path) in refused.value.message
    assert f"env.{name}" in refused.value.message and "not a knob the tuner searches" in (
        refused.value.message
    )


def test_the_tuners_own_knobs_load(tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    settings = {
        "threads.intra_op": 2,
        "threads.inter_op": 1,
        "env.TF_ENABLE_ONEDNN_OPTS": "0",
        "jit.level": "autoclustering",
        "precision.enabled": "mixed_bfloat16",
        "instances": 1,
    }
    save_result(_record(**settings), environ)
    measured = load_measured("abc123", "builtin:cnn", environ=environ)
    assert {key: s.value for key, s in measured.items()} == settings


@pytest.mark.parametrize("kind", ["symlink", "world-writable", "fifo"])
def test_a_planted_tuned_result_file_is_refused(kind: str, tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = result_path("abc123", "builtin:cnn", environ)
    path.parent.mkdir(parents=True)
    text = json.dumps(_record(**{"threads.intra_op": 1}))
    if kind == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(text)
        path.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(text)
        os.chmod(path, 0o666)
    with pytest.raises(TuneError) as refused:
        load_measured("abc123", "builtin:cnn", environ=environ)
    assert str(path) in refused.value.message
    why = {
        "symlink": "a symbolic link",
        "fifo": "not a regular file",
        "world-writable": "by others",
    }
    assert why[kind] in refused.value.message


@needs_root
def test_another_users_tuned_result_is_refused(tmp_path: Path) -> None:
    environ = {"HWTUNE_TUNED_DIR": str(tmp_path)}
    path = save_result(_record(**{"threads.intra_op": 1}), environ)
    _nobody_owns(path)
    with pytest.raises(TuneError, match=f"owned by uid {NOBODY}"):
        load_measured("abc123", "builtin:cnn", environ=environ)
