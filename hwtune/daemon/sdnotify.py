"""sd_notify(3) over a plain socket: READY=1, STATUS=, RELOADING=1, STOPPING=1, WATCHDOG=1.

The protocol is a datagram of newline-separated `KEY=value` assignments sent to the AF_UNIX
socket named by `$NOTIFY_SOCKET` (sd_notify(3), "Notes"; systemd's own reference client is
about 15 lines of C in the man page). A name starting with '@' is an abstract socket: the '@'
becomes a NUL byte. No libsystemd and no third-party package are needed, and nothing happens
when `$NOTIFY_SOCKET` is unset (not started by systemd, or `Type=` is not notify).

The socket is non-blocking: PID 1 reads it, but a harness, a container runtime or a stalled
manager may not, and a blocking `sendto` into a full queue would then hang the daemon for good,
SIGTERM included (the handler runs but the send is retried, PEP 475). A message that finds the
queue full is dropped (EAGAIN) and counted, as systemd's own sd_notify reports a failed send
to its caller and carries on (it sends with `MSG_NOSIGNAL` on a `SOCK_DGRAM|SOCK_CLOEXEC`
socket: src/libsystemd/sd-daemon/sd-daemon.c).

PID 1 reads a notification into a buffer of PIPE_BUF (4096) bytes and ignores one that did not
fit, READY=1 and all (src/core/manager.c, `manager_dispatch_notify_fd`: "Got overly long
notification datagram, ignoring"). `STATUS=` may quote a config file (a 6 KB key in an error
message), so it is cut to `MAX_STATUS_BYTES`, and the daemon sends `READY=1` in a datagram
of its own, before the status.

`RELOADING=1` must carry `MONOTONIC_USEC=` (the CLOCK_MONOTONIC time of the reload request)
for `Type=notify-reload`, which systemd 253 added (systemd.service(5), "Type=notify-reload";
sd_notify(3), "MONOTONIC_USEC=").
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from hwtune.models.digits import is_ascii_digits

# A status is a line for `systemctl status`; a quarter of PID 1's 4096-byte notification
# buffer leaves room for the other fields of the datagram.
MAX_STATUS_BYTES = 1024
ELLIPSIS = "…"
# The shortest time between two WATCHDOG=1 pings the daemon keeps: `--interval`'s own floor.
# WATCHDOG_USEC=1 (a typo for WatchdogSec=1s, or a test harness) asked for a ping every
# 0.5 µs: the loop spun a CPU sending ~20000 datagrams a second, most of them dropped and
# each run of drops logged. A watchdog shorter than this cannot be kept by a loop that
# re-detects the machine between pings anyway; systemd then stops the service, as it would.
MIN_PING_S = 0.1


def socket_address(name: str) -> str | None:
    """The `sendto` address for a `$NOTIFY_SOCKET` value; None for kinds not supported here.

    `/path` is a file-system socket and `@name` an abstract one. systemd ≥254 also accepts
    `vsock:CID:PORT` for VMs; hwtune runs on the host, so that is reported as unsupported.
    """
    if name.startswith("/"):
        return name
    if name.startswith("@") and len(name) > 1:
        return "\0" + name[1:]
    return None


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock systemd compares `MONOTONIC_USEC=` with."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def watchdog_interval(environ: Mapping[str, str], pid: int | None = None) -> float | None:
    """Seconds between `WATCHDOG=1` pings: half of `$WATCHDOG_USEC`, as sd_watchdog_enabled(3)
    recommends; None when the watchdog is off or `$WATCHDOG_PID` names another process."""
    raw = environ.get("WATCHDOG_USEC", "")
    # A u64 of microseconds (sd_watchdog_enabled(3)): 20 digits at most. The bound also keeps
    # int() from a bare ValueError on strings of over 4300 digits.
    if not is_ascii_digits(raw) or len(raw) > 20 or int(raw) == 0:
        return None
    owner = environ.get("WATCHDOG_PID", "")
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    return int(raw) / 1e6 / 2


@dataclass
class Notifier:
    """One datagram socket kept open for the process's life (no descriptor churn per message).

    `send` never raises and never blocks: a notification that cannot be delivered (socket
    gone, systemd restarting, nobody reading) must not take the daemon down or hang it; the
    last error is kept in `error` and the undelivered messages are counted in `dropped`.
    """

    address: str | None
    error: str | None = None
    dropped: int = 0
    _sock: socket.socket | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier:
        name = environ.get("NOTIFY_SOCKET", "")
        if not name:
            return cls(None)
        address = socket_address(name)
        if address is None:
            return cls(None, error=f"NOTIFY_SOCKET={name!r} is not a unix socket; not notifying")
        return cls(address)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        """Send `KEY=value` lines, e.g. `send(READY=1, STATUS="ok")`; True when delivered."""
        if self.address is None:
            return False
        message = "\n".join(
            f"{key}={capped_status(text) if key == 'STATUS' else text}"
            for key, text in ((key, _one_line(str(value))) for key, value in fields.items())
        )
        try:
            if self._sock is None:
                self._sock = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                )
            # a lone surrogate (a path with undecodable bytes) is escaped, not raised
            data = message.encode("utf-8", "backslashreplace")
            self._sock.sendto(data, socket.MSG_NOSIGNAL, self.address)
        except OSError as err:
            self.dropped += 1
            reason = (
                "nobody is reading the socket (its queue is full); message dropped"
                if isinstance(err, BlockingIOError)
                else str(err)
            )
            self.error = f"sd_notify to {self.address.lstrip(chr(0))!r} failed: {reason}"
            return False
        self.error = None
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(value: str) -> str:
    # A newline would start a new assignment; STATUS= texts are single lines by definition.
    return " ".join(value.splitlines())


def capped_status(text: str, limit: int = MAX_STATUS_BYTES) -> str:
    """`text` in at most `limit` bytes of UTF-8, cut at a character boundary and ended with
    an ellipsis when it had to be cut."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return text
    room = limit - len(ELLIPSIS.encode())
    # "ignore" drops the bytes of a character the cut went through, never a whole one before it
    return data[:room].decode("utf-8", "ignore") + ELLIPSIS
