"""Faults: broken files under the machine root, NVML and nvidia-smi failing, a broken TensorFlow.

Every case checks the same three things: detection completes (no probe raised: detect's
catch-all "probe failed unexpectedly" counts as a failure here), what went wrong is an issue,
and the planner still produces a profile that renders.

The machine tree is this machine as `hwtune snapshot` saved it (a real /proc and /sys subset).
Faults are real file-system states, not patched functions:
- a directory where a file should be (EISDIR), a dangling symlink, a symlink loop (ELOOP);
- a file whose read fails with EIO: a symlink to /proc/self/mem, whose page 0 is never mapped
  (as root, permission bits cannot make a file unreadable, and sysfs attributes really do
  fail reads with EIO/ENODEV);
- an empty file, binary junk, a removed file, a CPU's topology directory removed (a CPU going
  offline), and a thread that removes and restores CPU and node directories while detect runs.
A FIFO is not used: open(2) on a FIFO blocks until a writer appears, and the probes read
kernel pseudo-files (never FIFOs) or a snapshot hwtune wrote (regular files only); making
every read non-blocking would guard against a state that cannot occur.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hwtune.models.hardware import Hardware
from hwtune.probes import detect
from hwtune.probes.issues import IssueLog

from . import strategies as fz
from .conftest import LONG, REPO_ROOT, Figures, check_issue_paths, tree_settings, unexpected

# Files of the snapshot that detect reads, with the fault that fits each.
TARGETS = (
    "proc/cpuinfo",
    "lscpu.txt",
    "proc/meminfo",
    "proc/self/status",
    "proc/self/cgroup",
    "proc/self/mountinfo",
    "sys/devices/system/cpu/online",
    "sys/devices/system/cpu/present",
    "sys/devices/system/cpu/cpu1/topology/core_cpus_list",
    "sys/devices/system/cpu/cpu0/topology/physical_package_id",
    "sys/devices/system/cpu/cpu0/cache/index0/size",
    "sys/devices/system/cpu/cpu1/cache/index3/shared_cpu_list",
    "sys/devices/system/node/node0/cpulist",
    "sys/devices/system/node/node0/distance",
    "sys/devices/system/node/node0/meminfo",
    "sys/kernel/mm/transparent_hugepage/enabled",
)
DIRECTORIES = (
    "sys/devices/system/cpu/cpu1/topology",
    "sys/devices/system/cpu/cpu1",
    "sys/devices/system/cpu/cpu0/cache",
    "sys/devices/system/node/node0",
    "sys/devices/system/cpu",
    "sys/fs/cgroup",
    "proc/self",
)
FAULTS = ("directory", "dangling-symlink", "symlink-loop", "eio", "empty", "binary", "removed")


def break_path(path: Path, fault: str) -> None:
    """Put `path` (a file or directory of the tree) into the `fault` state."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if fault == "directory":
        path.mkdir()
        (path / "junk").write_text("1\n")
    elif fault == "dangling-symlink":
        path.symlink_to(path.parent / "does-not-exist")
    elif fault == "symlink-loop":
        path.symlink_to(path.name)
    elif fault == "eio":
        path.symlink_to("/proc/self/mem")
    elif fault == "empty":
        path.write_bytes(b"")
    elif fault == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif fault != "removed":
        raise AssertionError(fault)


def restore(root: Path, pristine: Path, relative: str) -> None:
    """Put `relative` back as it is in `pristine` (undoing break_path or an edit)."""
    target = root / relative
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif os.path.lexists(target):
        target.unlink()
    source = pristine / relative
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    elif os.path.lexists(source):
        shutil.copy2(source, target, follow_symlinks=False)


def detect_and_plan(root: Path, figures: Figures, what: str) -> Hardware:
    """detect -> plan -> render under `root`; fails on any probe that raised."""
    from hwtune.apply.render import render_all
    from hwtune.planner import plan

    hardware = detect(root, tensorflow=False)
    raised = unexpected(hardware.issues)
    assert not raised, f"{what}: a probe raised: {raised}"
    profile = plan(hardware)
    render_all(profile, hardware)
    check_issue_paths(figures, hardware.issues)
    figures.count("detect+plan completed")
    figures.count("issues recorded", len(hardware.issues))
    return hardware


@pytest.mark.parametrize("fault", FAULTS)
def test_sysfs_and_procfs_faults(
    fault: str, machine_snapshot: Path, machine_tree: Path, figures: Figures
) -> None:
    """Each fault on each file (and on whole directories) of the machine tree."""
    baseline = detect_and_plan(machine_tree, figures, "baseline")
    targets = TARGETS + (DIRECTORIES if fault in ("removed", "dangling-symlink", "eio") else ())
    for relative in targets:
        break_path(machine_tree / relative, fault)
        figures.count("faults injected")
        try:
            hardware = detect_and_plan(machine_tree, figures, f"{fault} at {relative}")
        finally:
            restore(machine_tree, machine_snapshot, relative)
        if hardware.issues != baseline.issues:
            figures.count("fault reported as an issue")
    figures.note(fault=fault, targets=len(targets))


def test_cpus_vanishing_while_detect_runs(machine_tree: Path, figures: Figures) -> None:
    """A CPU going offline mid-read: its directory and node links disappear and come back
    while detect runs, over and over."""
    moving = [
        machine_tree / "sys/devices/system/cpu/cpu1",
        machine_tree / "sys/devices/system/cpu/cpu0/cache",
        machine_tree / "sys/devices/system/node/node0",
    ]
    stop = threading.Event()
    toggles = 0

    def churn() -> None:
        nonlocal toggles
        while not stop.is_set():
            for path in moving:
                aside = path.with_name(path.name + ".offline")
                os.rename(path, aside)
                os.rename(aside, path)
                toggles += 1

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        for _ in range(400 if LONG else 40):
            detect_and_plan(machine_tree, figures, "churn")
    finally:
        stop.set()
        worker.join()
    figures.note(directory_renames=toggles * 2)
    assert toggles > 0


@st.composite
def tree_faults(draw: st.DrawFn, files: list[str]) -> list[tuple[str, str, str | None]]:
    chosen = draw(st.lists(st.sampled_from(files), min_size=1, max_size=8, unique=True))
    faults = []
    for relative in chosen:
        kind = draw(st.sampled_from((*FAULTS, "mutate", "mutate", "mutate")))
        faults.append((relative, kind, draw(fz.cgroup_value()) if kind == "mutate" else None))
    return faults


@functools.cache
def _tree_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name != "MANIFEST.json"
    )


@tree_settings
@given(data=st.data())
def test_machine_tree_fuzz(
    data: st.DataObject, machine_snapshot: Path, machine_tree: Path, figures: Figures
) -> None:
    """Several faults at once, anywhere in the tree, some files' text replaced by fuzz."""
    touched: list[str] = []
    try:
        for relative, kind, text in data.draw(
            tree_faults(_tree_files(machine_snapshot)), label="faults"
        ):
            touched.append(relative)
            path = machine_tree / relative
            if kind == "mutate":
                original = path.read_text(errors="replace")
                path.write_text(
                    data.draw(fz.mutated([original, text or ""]), label=relative),
                    errors="surrogateescape",
                )
            else:
                break_path(path, kind)
            figures.count("faults injected")
        detect_and_plan(machine_tree, figures, "tree fuzz")
    finally:
        for relative in reversed(touched):
            restore(machine_tree, machine_snapshot, relative)


# ---------------------------------------------------------------------------- GPUs


def _fake_nvml() -> Any:
    from tests.test_gpu_nvml import FakeGpu, FakeNvml

    return FakeGpu, FakeNvml


NVML_FAULTS = {
    "GPU lost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "not supported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "timeout": pynvml.NVML_ERROR_TIMEOUT,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}


def _two_gpus() -> list[Any]:
    fake_gpu, _ = _fake_nvml()
    return [
        fake_gpu("NVIDIA A100-SXM4-40GB", "00000000:07:00.0", cpus=(0,)),
        fake_gpu("NVIDIA A100-SXM4-40GB", "00000000:0F:00.0", cpus=(1,)),
    ]


@pytest.fixture
def machine_hardware(machine_snapshot: Path) -> Hardware:
    return detect(machine_snapshot, gpus=False, tensorflow=False)


def plan_with_gpus(hardware: Hardware, report: Any, figures: Figures) -> None:
    from hwtune.apply.render import render_all
    from hwtune.planner import plan

    with_gpus = replace(
        hardware, gpus=report.gpus, gpu_source=report.source, gpu_driver=report.driver_version
    )
    render_all(plan(with_gpus), with_gpus)
    figures.count("planned with the GPUs that answered")


def test_one_nvml_call_failing(
    machine_hardware: Hardware, tmp_path: Path, figures: Figures
) -> None:
    """Every NVML call the adapter makes, failing with each error, on one GPU and on all."""
    from hwtune.probes.gpu import probe_gpus

    _, fake_nvml = _fake_nvml()
    calls = sorted(n for n in dir(fake_nvml) if n.startswith(("nvmlDevice", "nvmlSystem")))
    assert len(calls) >= 10
    missing_smi = str(tmp_path / "no-nvidia-smi")
    for call in calls:
        for label, code in NVML_FAULTS.items():
            for scope in (call, f"{call}:1"):
                issues = IssueLog()
                report = probe_gpus(
                    tmp_path,
                    issues,
                    live=True,
                    nvidia_smi=missing_smi,
                    nvml_library=fake_nvml(_two_gpus(), faults={scope: code}),
                )
                figures.count("faults injected")
                assert report.gpus or len(issues), f"{scope} {label}: no GPUs and no issue"
                if call in ("nvmlDeviceGetCount",) or (scope == call and "Handle" in call):
                    pass  # no GPU can be listed without these; an issue says so
                else:
                    assert len(report.gpus) >= 1, f"{scope} {label}: every GPU lost"
                if len(issues):
                    figures.count(f"issue recorded ({label})")
                plan_with_gpus(machine_hardware, report, figures)
    figures.note(nvml_calls=len(calls), errors=list(NVML_FAULTS))


@pytest.mark.parametrize(
    "code",
    [
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_UNKNOWN,
    ],
)
def test_nvml_init_failing(
    code: int, machine_hardware: Hardware, tmp_path: Path, figures: Figures
) -> None:
    from hwtune.probes.gpu import probe_gpus

    _, fake_nvml = _fake_nvml()
    issues = IssueLog()
    report = probe_gpus(
        tmp_path,
        issues,
        live=True,
        nvidia_smi=str(tmp_path / "none"),
        nvml_library=fake_nvml(_two_gpus(), faults={"nvmlInit": code}),
    )
    assert report.gpus == ()
    reasons = " ".join(i.reason for i in issues)
    assert "nvmlInit failed" in reasons and "nvidia-smi" in reasons, reasons
    figures.count("faults injected")
    figures.count("issue recorded")
    plan_with_gpus(machine_hardware, report, figures)


def test_nvml_library_missing_or_broken(
    machine_hardware: Hardware, tmp_path: Path, figures: Figures
) -> None:
    """No libnvidia-ml.so.1 at all, then one that is not a loadable library."""
    from hwtune.probes.gpu import probe_gpus

    root = tmp_path / "root"
    root.mkdir()
    for state in ("missing", "not an ELF", "empty", "directory"):
        library = root / "usr/lib64/libnvidia-ml.so.1"
        if state != "missing":
            break_path(
                library,
                {"not an ELF": "binary", "empty": "empty", "directory": "directory"}[state],
            )
        issues = IssueLog()
        report = probe_gpus(root, issues, live=True, nvidia_smi=str(tmp_path / "none"))
        assert report.gpus == ()
        if state != "missing":
            assert any("cannot load" in i.reason for i in issues), list(issues)
        figures.count("faults injected")
        plan_with_gpus(machine_hardware, report, figures)


def test_nvml_call_that_never_returns(figures: Figures) -> None:
    """A wedged driver: the session is abandoned at the deadline with the GPUs read so far."""
    from hwtune.probes import nvml

    _, fake_nvml = _fake_nvml()
    release = threading.Event()
    try:
        issues = IssueLog()
        report = nvml.probe_nvml(
            issues,
            library=fake_nvml(_two_gpus(), block={"nvmlDeviceGetName:1": release}),
            deadline_s=0.5,
        )
        assert report is not None
        assert any("did not answer" in i.reason for i in issues), list(issues)
        figures.count("faults injected")
        figures.count("issue recorded")
    finally:
        release.set()


NVIDIA_SMI_SCRIPTS = {
    "exits 9": "echo 'NVIDIA-SMI has failed because it could not communicate' >&2; exit 9",
    "prints junk": "head -c 3000 /dev/urandom",
    "prints half a document": "printf '<?xml version=\"1.0\"?><nvidia_smi_log><gpu><product'",
    "prints an entity bomb": (
        'cat <<\'EOF\'\n<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
        "<nvidia_smi_log><gpu><product_name>&lol2;</product_name></gpu></nvidia_smi_log>\nEOF"
    ),
    "hangs": "exec sleep 60",
}


@pytest.mark.parametrize("behaviour", sorted(NVIDIA_SMI_SCRIPTS))
def test_nvidia_smi_fallback_failing(
    behaviour: str, machine_hardware: Hardware, tmp_path: Path, figures: Figures
) -> None:
    """NVML cannot start and the nvidia-smi fallback misbehaves (a real executable)."""
    from hwtune.probes.gpu import probe_gpus

    _, fake_nvml = _fake_nvml()
    script = tmp_path / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + NVIDIA_SMI_SCRIPTS[behaviour] + "\n")
    script.chmod(0o755)
    issues = IssueLog()
    report = probe_gpus(
        tmp_path,
        issues,
        live=True,
        nvidia_smi=str(script),
        timeout_s=1.0,
        nvml_library=fake_nvml([], faults={"nvmlInit": 9}),
    )
    assert report.gpus == ()
    assert any(i.probe == "nvidia-smi" for i in issues), list(issues)
    assert "lollol" not in json.dumps([i.reason for i in issues])
    figures.count("faults injected")
    figures.count("issue recorded")
    plan_with_gpus(machine_hardware, report, figures)


# ---------------------------------------------------------------------------- TensorFlow


def fake_tensorflow(
    site: Path, *, meta: bool = True, package: bool = True, raise_on_import: bool = True
) -> tuple[Path, Path]:
    """A TensorFlow that pip would list but that is broken: returns (dist-info, package)."""
    dist = site / "tensorflow_cpu-2.21.0.dist-info"
    pkg = site / "tensorflow"
    if meta:
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: tensorflow-cpu\nVersion: 2.21.0\n"
        )
        (dist / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp311-cp311-manylinux_2_17_x86_64\n")
        (dist / "INSTALLER").write_text("pip\n")
        (dist / "RECORD").write_text("tensorflow/__init__.py,,\n" * 4000)
    if package:
        (pkg / "python/platform").mkdir(parents=True)
        body = "raise ImportError('BROKEN-TF: libtensorflow_framework.so.2: cannot open')\n"
        (pkg / "__init__.py").write_text(body if raise_on_import else "")
        (pkg / "python/platform/build_info.py").write_text(
            "build_info = {'is_cuda_build': False, 'cpu_compiler': 'gcc'}\n"
        )
        (pkg / "libtensorflow_framework.so.2").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(20))
    return dist, pkg


TF_BREAKAGES: dict[str, Callable[[Path, Path], object]] = {
    "package raises on import": lambda d, p: None,
    "package directory missing": lambda d, p: shutil.rmtree(p),
    "metadata missing": lambda d, p: shutil.rmtree(d),
    "METADATA unreadable (EIO)": lambda d, p: break_path(d / "METADATA", "eio"),
    "METADATA binary": lambda d, p: break_path(d / "METADATA", "binary"),
    "build_info.py a directory": lambda d, p: break_path(
        p / "python/platform/build_info.py", "directory"
    ),
    "build_info.py not Python": lambda d, p: (p / "python/platform/build_info.py").write_text(
        "build_info = {\n"
    ),
    "build_info.py runs code": lambda d, p: (p / "python/platform/build_info.py").write_text(
        "build_info = {'x': open(__file__ + '.CANARY', 'w')}\n"
    ),
    "shared object a dangling symlink": lambda d, p: break_path(
        p / "libtensorflow_framework.so.2", "dangling-symlink"
    ),
    "shared object unreadable (EIO)": lambda d, p: break_path(
        p / "libtensorflow_framework.so.2", "eio"
    ),
    "shared object a directory": lambda d, p: break_path(
        p / "libtensorflow_framework.so.2", "directory"
    ),
    "version not a version": lambda d, p: (d / "METADATA").write_text(
        "Name: tensorflow-cpu\nVersion: banana\n"
    ),
}


@pytest.mark.parametrize("breakage", sorted(TF_BREAKAGES))
def test_tensorflow_installed_but_broken(
    breakage: str, machine_hardware: Hardware, tmp_path: Path, figures: Figures
) -> None:
    from hwtune.apply.render import render_all
    from hwtune.planner import plan
    from hwtune.probes.tensorflow import probe_tensorflow

    site = tmp_path / "site"
    dist, pkg = fake_tensorflow(site)
    TF_BREAKAGES[breakage](dist, pkg)
    issues = IssueLog()
    info = probe_tensorflow(
        tmp_path, issues, machine_hardware.cpu, live=True, search_path=[str(site)]
    )
    canary = pkg / "python/platform/build_info.py.CANARY"
    assert not canary.exists(), "build_info.py was executed"
    assert len(issues) or info is not None
    check_issue_paths(figures, issues)
    hardware = replace(machine_hardware, tensorflow=info)
    render_all(plan(hardware), hardware)
    figures.count("faults injected")
    figures.count("issue recorded" if len(issues) else "no issue (not needed)")
    figures.count("planned")


# ---------------------------------------------------------------------------- configure()

CONFIGURE_SCRIPT = r"""
import json, os, sys, warnings
warnings.simplefilter("always")
scenario = sys.argv[1]
result = {"scenario": scenario}
import hwtune
from hwtune.errors import HwtuneError
with warnings.catch_warnings(record=True) as caught:
    try:
        report = hwtune.configure(strict=scenario.startswith("strict"))
        result["raised"] = None
        result["env_set"] = len(report.env_set)
        result["notes"] = list(report.notes)
    except HwtuneError as err:
        result["raised"] = type(err).__name__ + ": " + err.message
    result["warnings"] = [str(w.message) for w in caught]
    if scenario == "broken tensorflow":
        try:
            import tensorflow
            result["tf_import"] = "imported"
        except ImportError as err:
            result["tf_import"] = str(err)
print(json.dumps(result))
"""

CONFIGURE_CASES: dict[str, tuple[dict[str, str], str]] = {
    # scenario: (extra environment, expected outcome)
    "HWTUNE_MODE invalid": ({"HWTUNE_MODE": "fastest"}, "warned"),
    "strict HWTUNE_MODE invalid": ({"HWTUNE_MODE": "fastest"}, "raised"),
    "config file not TOML": ({"XDG_CONFIG_HOME": "{tmp}/config"}, "warned"),
    "launcher rank junk": ({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2"}, "warned"),
    "cache directory is a file": ({"XDG_CACHE_HOME": "{tmp}/cachefile"}, "configured"),
    "cache file corrupt": ({"XDG_CACHE_HOME": "{tmp}/cache"}, "configured"),
    "broken tensorflow": ({"PYTHONPATH": "{tmp}/site"}, "configured"),
    # planned with the rules, a note naming the file (tuned_result_fault writes it)
    "tuned result not UTF-8": (
        {"HWTUNE_TUNED_DIR": "{tmp}/tuned", "HWTUNE_WORKLOAD": "builtin:cnn"},
        "configured",
    ),
}


@pytest.mark.parametrize("scenario", sorted(CONFIGURE_CASES))
def test_configure_never_raises_into_the_program(
    scenario: str, tmp_path: Path, figures: Figures
) -> None:
    """`hwtune.configure()` in a real interpreter: a warning, never an exception, unless strict;
    a broken TensorFlow fails the program's own import with TensorFlow's error, not hwtune's."""
    extra, expected = CONFIGURE_CASES[scenario]
    (tmp_path / "config/hwtune").mkdir(parents=True)
    (tmp_path / "config/hwtune/config.toml").write_text("mode = [unclosed\n")
    (tmp_path / "cachefile").write_text("not a directory\n")
    (tmp_path / "cache/hwtune").mkdir(parents=True)
    for name in ("configure-default.json",):
        (tmp_path / "cache/hwtune" / name).write_bytes(b'\x00{"schema": 1, "payload": [')
    fake_tensorflow(tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "XDG_"))}
    env.update({k: v.format(tmp=tmp_path) for k, v in extra.items()})
    env.setdefault("XDG_CACHE_HOME", str(tmp_path / "fresh-cache"))
    env.setdefault("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    if "PYTHONPATH" in env:
        env["PYTHONPATH"] += os.pathsep + str(REPO_ROOT)
    else:
        env["PYTHONPATH"] = str(REPO_ROOT)
    broken = None
    if scenario.startswith("tuned"):
        from hwtune.pipeline.request import PlanRequest, profile_for

        fingerprint = profile_for(
            PlanRequest(env)
        ).profile.fingerprint  # this machine's, as configure()'s
        broken = tuned_result_fault(tmp_path / "tuned", fingerprint, "not-utf8")
    done = subprocess.run(
        [sys.executable, "-c", CONFIGURE_SCRIPT, scenario],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if expected == "raised":
        assert result["raised"] and result["raised"].startswith("ConfigError"), result
    else:
        assert result["raised"] is None, result
    if expected == "warned":
        assert any("hwtune.configure" in w for w in result["warnings"]), result
    if expected == "configured":
        assert result["env_set"] > 0, result
    if scenario == "broken tensorflow":
        assert "BROKEN-TF" in result["tf_import"], result
    if broken is not None:
        assert any(str(broken) in note for note in result["notes"]), result
    figures.count("faults injected")
    figures.count(expected)


# ---------------------------------------------------------------------------- tuned results

# File-system faults of hwtune/pipeline/measured.py's files, plus two of its own: the fingerprint's
# directory is a file, and a broken entry beside a good result (the good one is used).
TUNED_FAULTS = (
    *(f for f in FAULTS if f != "removed"),
    "not-utf8",
    "fingerprint-dir-is-a-file",
    "beside-a-good-result",
)


def tuned_record(fingerprint: str, **settings: object) -> dict[str, object]:
    return {
        "schema": 1,
        "fingerprint": fingerprint,
        "workload": "builtin:cnn",
        "mode": "throughput",
        "ratio": 1.31,
        "settings": settings or {"threads.intra_op": 1, "instances": 1},
    }


def tuned_result_fault(tuned: Path, fingerprint: str, fault: str) -> Path | None:
    """Break the tuned result of `fingerprint` under `tuned`; returns the path a warning must
    name (None when a good result is still there to use)."""
    target = tuned / fingerprint / "builtin_cnn.json"
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    if fault == "fingerprint-dir-is-a-file":
        target.parent.write_text("not a directory\n")
        return target.parent
    target.parent.mkdir(exist_ok=True)
    if fault == "not-utf8":  # a Latin-1 "é" in a value, as an editor might save it
        record = json.dumps(tuned_record(fingerprint, **{"env.KMP_BLOCKTIME": "\x01"}))
        target.write_bytes(record.encode().replace(b"\\u0001", b"\xe9"))
        return target
    if fault == "beside-a-good-result":
        good = target.with_name("builtin_mlp.json")
        good.write_text(json.dumps({**tuned_record(fingerprint), "workload": "builtin:mlp"}))
        os.utime(good, (1, 1))  # older: the broken entry is the newest
        break_path(target, "directory")
        return None
    break_path(target, fault)
    return target


@pytest.mark.parametrize("fault", TUNED_FAULTS)
def test_tuned_result_faults(
    fault: str, machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """A tuned result that cannot be used never stops `plan` or `apply`: they plan with the
    rules, exit 0, and say which file they ignored and why."""
    from tests.conftest import run_cli

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "XDG_"))}
    environ.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        HWTUNE_TUNED_DIR=str(tmp_path / "tuned"),
    )
    root = ["--root", str(machine_snapshot)]
    fingerprint = json.loads(run_cli(["plan", *root, "--json"], environ).stdout)["fingerprint"]
    named = tuned_result_fault(tmp_path / "tuned", fingerprint, fault)
    # A result applies where its workload is named: the broken one, or the good one beside it.
    environ["HWTUNE_WORKLOAD"] = "builtin:mlp" if named is None else "builtin:cnn"
    planned = run_cli(["plan", *root, "--json"], environ)
    assert planned.exit_status == 0, planned.stderr
    source = json.loads(planned.stdout)["threads"]["intra_op"]["source"]
    applied = run_cli(["apply", *root, "--output", str(tmp_path / "out")], environ)
    assert applied.exit_status == 0, applied.stderr
    if named is None:
        assert source == "measured", planned.stderr
        figures.count("good result beside a broken entry: used")
        return
    assert source == "rule"
    for output in (planned.stderr, applied.stdout):
        assert "tuned results ignored" in output and str(named) in output, output
    figures.count("faults injected")
    figures.count("planned with the rules, warning names the file")


def test_tuned_instances_beyond_this_machine(
    machine_snapshot: Path, tmp_path: Path, figures: Figures
) -> None:
    """A well-formed result whose instance count this machine cannot hold (hand-edited or
    damaged: the store cannot know the machine's cores) never stops a plan: outside batch
    mode the count is not used; in batch mode, where it is, the whole result is ignored and
    the note names the file."""
    from tests.conftest import run_cli

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HWTUNE_", "XDG_"))}
    environ.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"), HWTUNE_TUNED_DIR=str(tmp_path / "tuned")
    )
    root = ["--root", str(machine_snapshot)]
    fingerprint = json.loads(run_cli(["plan", *root, "--json"], environ).stdout)["fingerprint"]
    target = tmp_path / "tuned" / fingerprint / "builtin_cnn.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps({**tuned_record(fingerprint, instances=1024), "mode": "batch"}))
    batch = ["--mode", "batch", "--workload", "builtin:cnn"]
    planned = run_cli(["plan", *root, "--json", *batch], environ)
    assert planned.exit_status == 0, planned.stderr
    assert json.loads(planned.stdout)["intent"]["instances"] < 1024
    from hwtune.pipeline.request import PlanRequest, profile_for

    request = PlanRequest(
        environ, root=str(machine_snapshot), workload="builtin:cnn", mode="batch", for_exec=True
    )
    notes = profile_for(request).notes
    assert any("tuned results ignored" in n and str(target) in n for n in notes), notes
    figures.count("planned with the rules, warning names the file")
