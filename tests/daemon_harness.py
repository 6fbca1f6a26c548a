"""Test harness for the daemon: a host tree under a root, a NOTIFY_SOCKET, the real daemon.

`build_host(root)` lays out what the probes read for a 24-CPU, 2-socket Haswell node (the
verbatim cpuinfo capture in tests/data/daemon, SOURCES.md there) with cgroup v1 limits and two
Tesla T4s (the T4 `nvidia-smi -q -x` capture in tests/data/gpu, its <gpu> element twice) under
an installed TensorFlow 2.14 CUDA build, whose CUDA 11.8 the capture's driver (CUDA 11.7) runs;
`Host` has the edits the tests make (CPU offline, quota, GPUs, config). `DaemonProcess` starts
`python -m hwtune daemon` with a datagram socket bound in the test as `$NOTIFY_SOCKET`, records
every notification and the stderr log, and sends signals.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import DATA, REPO

CPUINFO = DATA / "daemon" / "spack-rhel7-haswell.cpuinfo"
T4_XML = DATA / "gpu" / "telegraf-tesla-t4-xml.smi"
CPUS = 24
V1_UNLIMITED = "9223372036854771712"  # PAGE_COUNTER_MAX on 4 KiB pages: "no memory limit"
# Generous waits for a loaded 2-core CI machine; the latency itself is measured in
# bench/bench_daemon.py, not asserted here.
WAIT_S = 20.0


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def replace_file(path: Path, text: str) -> None:
    """Replace a file the way real writers do (write a temporary, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _cpuinfo_places() -> list[tuple[int, int, int]]:
    """(cpu, physical id, core id) per processor of the capture."""
    places, cpu, package = [], -1, 0
    for line in CPUINFO.read_text().splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            cpu = int(value)
        elif key == "physical id":
            package = int(value)
        elif key == "core id":
            places.append((cpu, package, int(value)))
    return places


def gpu_xml(count: int) -> str:
    """The T4 capture with its <gpu> element repeated `count` times (distinct bus ids/uuids)."""
    text = T4_XML.read_text()
    start, end = text.index("    <gpu id="), text.index("</gpu>") + len("</gpu>\n")
    element = text[start:end]
    copies = []
    for i in range(count):
        copy = element.replace('id="00000000:00:1E.0"', f'id="00000000:00:{0x1E + i:02X}.0"')
        copy = copy.replace("<minor_number>0</minor_number>", f"<minor_number>{i}</minor_number>")
        copy = copy.replace("99096249601a", f"9909624960{i:02x}")
        copies.append(copy)
    head = text[:start].replace(
        "<attached_gpus>1</attached_gpus>", f"<attached_gpus>{count}</attached_gpus>"
    )
    return head + "".join(copies) + text[end:]


def build_host(root: Path, *, gpus: int = 2) -> Host:
    places = _cpuinfo_places()
    assert len(places) == CPUS
    _write(root / "proc/cpuinfo", CPUINFO.read_text())
    _write(root / "proc/meminfo", "MemTotal:       65536000 kB\nMemAvailable:   60000000 kB\n")
    _write(root / "proc/self/status", f"Name:\tpython\nCpus_allowed_list:\t0-{CPUS - 1}\n")
    _write(
        root / "proc/self/cgroup",
        "7:memory:/job\n5:cpuset:/job\n4:cpu,cpuacct:/job\n1:name=systemd:/job\n",
    )
    mounts = [
        (30, "cpu,cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "rw,cpu,cpuacct"),
        (31, "cpuset", "/sys/fs/cgroup/cpuset", "rw,cpuset"),
        (32, "memory", "/sys/fs/cgroup/memory", "rw,memory"),
    ]
    _write(
        root / "proc/self/mountinfo",
        "".join(
            f"{n} 20 0:{n} / {point} rw,nosuid,nodev,noexec,relatime shared:{n} - cgroup cgroup "
            f"{opts}\n"
            for n, _, point, opts in mounts
        ),
    )
    cg = root / "sys/fs/cgroup"
    for level in ("", "job/"):
        _write(cg / f"cpu,cpuacct/{level}cpu.cfs_quota_us", "-1\n")
        _write(cg / f"cpu,cpuacct/{level}cpu.cfs_period_us", "100000\n")
        _write(cg / f"cpuset/{level}cpuset.cpus", f"0-{CPUS - 1}\n")
        _write(cg / f"cpuset/{level}cpuset.effective_cpus", f"0-{CPUS - 1}\n")
        _write(cg / f"cpuset/{level}cpuset.mems", "0-1\n")
        _write(cg / f"memory/{level}memory.limit_in_bytes", V1_UNLIMITED + "\n")
    cpu_dir = root / "sys/devices/system/cpu"
    for name in ("online", "present", "possible"):
        _write(cpu_dir / name, f"0-{CPUS - 1}\n")
    for cpu, package, core in places:
        topo = cpu_dir / f"cpu{cpu}/topology"
        _write(topo / "physical_package_id", f"{package}\n")
        _write(topo / "core_id", f"{core}\n")
        _write(topo / "core_cpus_list", f"{cpu}\n")
        _write(topo / "thread_siblings_list", f"{cpu}\n")
    node_dir = root / "sys/devices/system/node"
    _write(node_dir / "online", "0-1\n")
    for node in (0, 1):
        cpus = [c for c, p, _ in places if p == node]
        _write(node_dir / f"node{node}/cpulist", f"{min(cpus)}-{max(cpus)}\n")
        _write(node_dir / f"node{node}/distance", "10 21\n" if node == 0 else "21 10\n")
        _write(node_dir / f"node{node}/meminfo", f"Node {node} MemTotal:       32768000 kB\n")
    _write(root / "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    if gpus:
        from tests.gpu_roots import add_cuda_11_tensorflow

        _write(root / "nvidia-smi-q.xml", gpu_xml(gpus))
        # the T4 capture's driver (CUDA 11.7) runs TensorFlow's GPU build only up to 2.14 (CUDA
        # 11.8): TF 2.15+ is CUDA 12 and would plan for the CPU
        add_cuda_11_tensorflow(root, root.parent / f"{root.name}-site")
    return Host(root)


@dataclass
class Host:
    """Edits to the tree, made the way the kernel or an admin would change the real thing."""

    root: Path

    def set_online(self, cpus: str) -> None:
        replace_file(self.root / "sys/devices/system/cpu/online", cpus + "\n")

    def set_quota(self, cpus: float | None) -> None:
        value = "-1" if cpus is None else str(int(cpus * 100_000))
        replace_file(self.root / "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", value + "\n")

    def set_gpus(self, count: int) -> None:
        replace_file(self.root / "nvidia-smi-q.xml", gpu_xml(count))


@dataclass
class DaemonProcess:
    """`python -m hwtune daemon` under test, with its notifications and log."""

    tmp: Path
    root: Path
    output: Path
    interval: float = 0.2
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # of each datagram, in bytes
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.sock_path = self.tmp / "notify.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.sock_path))
        self.log_path = self.tmp / "daemon.log"
        self.config_home = self.tmp / "xdg"
        self.config = self.config_home / "hwtune" / "config.toml"

    def start(self) -> DaemonProcess:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.tmp),
            "XDG_CONFIG_HOME": str(self.config_home),
            "NOTIFY_SOCKET": str(self.sock_path),
            "PYTHONPATH": str(REPO),
            **self.extra_env,
        }
        argv = [
            sys.executable,
            "-m",
            "hwtune",
            "daemon",
            "--root",
            str(self.root),
            "--output",
            str(self.output),
            "--interval",
            str(self.interval),
            *self.extra_args,
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _receive(self, timeout: float) -> bool:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        self.messages.append(fields)
        self.sizes.append(len(data))
        return True

    def drain(self) -> None:
        while self._receive(0.001):
            pass

    def wait_message(
        self, predicate: Callable[[dict[str, str]], bool], timeout: float = WAIT_S, after: int = 0
    ) -> dict[str, str]:
        """The first message (index ≥ `after`) that satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self.messages[after:]:
                if predicate(message):
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (
                self.proc is not None and self.proc.poll() is not None and not self._receive(0.05)
            ):
                raise AssertionError(
                    f"no matching notification in {timeout}s; got {self.messages}\n"
                    f"log:\n{self.log()}"
                )
            self._receive(min(remaining, 0.2))

    def wait_ready(self) -> dict[str, str]:
        return self.wait_message(lambda m: m.get("READY") == "1")

    def count(self, key: str, value: str = "1") -> int:
        return sum(1 for m in self.messages if m.get(key) == value)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def stop(self, timeout: float = WAIT_S) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.drain()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()


def wait_for(
    check: Callable[[], bool], what: str, timeout: float = WAIT_S, step: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def env_value(output: Path, name: str) -> str | None:
    """A variable's value in the applied dotenv file (None when absent or unreadable)."""
    try:
        text = (output / "hwtune.dotenv").read_text()
    except OSError:
        return None
    match = re.search(rf"^{re.escape(name)}=(.*)$", text, re.MULTILINE)
    return match.group(1) if match else None


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS line")
