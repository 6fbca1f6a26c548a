"""What a benchmark run was made with: the machine's name, the hwtune commit, the load at
start, and the hardware that decides which scenarios can run (bf16, GPUs)."""

from __future__ import annotations

import importlib.util
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import background

from hwtune import __version__
from hwtune.models.hardware import CpuInfo, Hardware

REPO = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_name(cpu: CpuInfo, usable_cpus: int) -> str:
    """CPU model, microarchitecture, usable CPUs and hypervisor: "amd-epyc-znver3-2cpu-kvm".

    The model name alone does not tell machines apart: a KVM guest of a Zen 3 and of a Zen 4
    host both read "AMD EPYC", and their results differ (Zen 4 has AVX512_BF16, so its S1
    grid has bf16 configurations)."""
    parts = [slug(cpu.model_name or cpu.arch)]
    march = slug(cpu.microarch or "")
    if march and march not in parts[0]:
        parts.append(march)
    parts.append(f"{usable_cpus}cpu")
    if cpu.hypervisor:
        parts.append(slug(cpu.hypervisor))
    return "-".join(parts)


def default_machine() -> str:
    from hwtune.probes import detect

    hw = detect(gpus=False, tensorflow=False)
    return machine_name(hw.cpu, len(hw.limits.usable_cpus))


def git_commit(repo: Path = REPO) -> str | None:
    """`git rev-parse --short HEAD`, "+dirty" when the tree differs from it; None without git.

    Results files are left out: a resumed run has already changed its own journal."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return None
    changes = git("status", "--porcelain", "--", ".", ":(exclude)bench/results")
    return head + ("+dirty" if changes is None or changes else "")


def check_hwtune() -> str | None:
    """Why this hwtune cannot run the benchmark, or None: it must know `tune --model`."""
    proc = subprocess.run(
        [sys.executable, "-m", "hwtune", "tune", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        return f"`python -m hwtune tune --help` failed:\n{proc.stderr[-2000:]}"
    if "--model" not in proc.stdout:
        return (
            "this hwtune's `tune` has no --model option, which every scenario passes "
            "(S1 --model conv, S2 --model dense, …)"
        )
    return None


# CPU flags of native bf16 arithmetic (kernel names, /proc/cpuinfo): where a bf16 run means
# something (AVX512_BF16 on Cooper Lake and Zen 4 on, AMX-BF16 on Sapphire Rapids on).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def accelerators(hw: Hardware) -> dict[str, Any]:
    """What decides the scenarios that need special hardware: a bf16 CPU, GPUs."""
    return {
        "bf16_flags": [flag for flag in BF16_FLAGS if flag in hw.cpu.flags],
        "gpus": len(hw.gpus),
    }


def session(machine: str, hw: Hardware | None = None) -> dict[str, Any]:
    """What this start of bench/run ran with, and how loaded the machine was before it."""
    cpus = background.online_cpus()
    load = background.loadavg()
    warning = background.load_warning(load, cpus)
    if warning:
        log(warning)
    if importlib.util.find_spec("matplotlib") is None:
        log(
            "warning: matplotlib is missing, so the report will have no chart "
            "(pip install 'hwtune[bench]', then `bench/run --report-only`)"
        )
    return {
        "phase": "session",
        "machine": machine,
        "started": time.time(),
        "commit": git_commit(),
        "hwtune": __version__,
        "python": platform.python_version(),
        "cpus": cpus,
        "loadavg": load,
        **(accelerators(hw) if hw is not None else {}),
    }
