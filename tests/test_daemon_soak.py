"""Soak: many change cycles through the real daemon, with no descriptor or memory growth.

Each cycle moves the CPU quota and waits until the applied file follows, so every cycle is a
full detect → plan → apply → log → notify round trip. The default run checks descriptors over
40 cycles (~7 s with its warm-up). RSS needs a 200-cycle warm-up before its baseline means
anything (below), so the RSS soaks, 100 cycles and the 1000 the issue asks for, run with
`-m slow`: the 100-cycle one took 30 s of the default run's 10-minute budget.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.daemon_harness import DaemonProcess, build_host, env_value, open_fds, rss_kib

# Cycles before the baseline: imports, caches, the journal ring (20) fill up, and the
# interpreter's heap stops growing. That takes ~100 cycles on 3.11 but ~200 on 3.10 and 3.13
# (RSS then flat to cycle 400 on each): after 60, 3.10 and 3.13 still grew 2.2 MB in 100.
WARM_UP = 200
RSS_BUDGET_KIB = 2048  # the bound: under 2 MB of RSS growth


def idle(daemon: DaemonProcess) -> tuple[int, int]:
    """(open fds, RSS KiB): the smallest of a few samples, so that a file the daemon has open
    for a moment is not counted as a leak."""
    samples = []
    for _ in range(5):
        samples.append((open_fds(daemon.pid), rss_kib(daemon.pid)))
        time.sleep(0.02)
    return min(s[0] for s in samples), min(s[1] for s in samples)


def soak(tmp_path: Path, cycles: int, *, warm_up: int = WARM_UP, rss: bool = True) -> None:
    host = build_host(tmp_path / "root", gpus=1)
    daemon = DaemonProcess(tmp_path, host.root, tmp_path / "out", interval=0.2)
    try:
        daemon.start()
        daemon.wait_ready()
        fds = baseline_rss = 0
        previous = "none"
        for cycle in range(warm_up + cycles):
            quota = f"{1 + cycle % 2}.0"  # 1, 2, 1, 2…: every cycle changes the profile
            mark = len(daemon.messages)
            host.set_quota(float(quota))
            # STATUS= is the last thing a cycle does: after it the daemon is back in select().
            change = f"cpu quota {previous}→{quota}"
            daemon.wait_message(
                lambda m, c=change: c in m.get("STATUS", ""),  # type: ignore[misc]
                after=mark,
            )
            previous = quota
            assert env_value(daemon.output, "TF_NUM_INTRAOP_THREADS") == quota[0]
            del daemon.messages[:-1]  # keep the record short over 1000 cycles
            if cycle == warm_up - 1:
                fds, baseline_rss = idle(daemon)
        end_fds, end_rss = idle(daemon)
        assert end_fds <= fds, f"file descriptors: {fds} after warm-up, {end_fds} at the end"
        if rss:
            growth = end_rss - baseline_rss
            assert growth < RSS_BUDGET_KIB, f"RSS grew {growth} KiB over {cycles} cycles"
        assert "Traceback" not in daemon.log()
        assert daemon.stop() == 0
    finally:
        daemon.close()


def test_descriptors_stay_flat_over_40_cycles(tmp_path: Path) -> None:
    # The journal ring (20 entries) is full after 20 cycles: its files are all opened and closed
    # by then, so the descriptor baseline is taken after it.
    soak(tmp_path, 40, warm_up=20, rss=False)


@pytest.mark.slow
def test_soak_100_cycles(tmp_path: Path) -> None:
    soak(tmp_path, 100)


@pytest.mark.slow
def test_soak_1000_cycles(tmp_path: Path) -> None:
    soak(tmp_path, 1000)
