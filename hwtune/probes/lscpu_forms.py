"""The shapes saved `lscpu` output comes in besides the plain summary, what parsing it gives
(`LscpuFacts`, `LscpuRow`), and its cache lines.

- Shell transcripts: prompts ("user@host:~$ lscpu -e", "[root@h ~]# lscpu", "$ lscpu") and the
  output of other commands are blanked, keeping line numbers, so only what lscpu printed (or a
  `cat` of a saved lscpu file) is parsed;
- `lscpu -e`: the extended table ("CPU NODE SOCKET CORE L1d:L1i:L2:L3 ONLINE MAXMHZ MINMHZ MHZ",
  the column names of util-linux sys-utils/lscpu.c), space-aligned, "-" where a value is unknown,
  "yes"/"no" in ONLINE.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from hwtune.models.digits import is_ascii_digits, within_u64
from hwtune.probes.cpuinfo import ParseProblem

# A prompt someone's shell printed: "(venv) user@host:~/dir$ ", "[root@host ~]# ", "host% ", or
# a bare "$ ". A bare "# " also starts lscpu's own `-p` comments, so it counts only before a
# command that names lscpu or a usual companion.
_PROMPT = re.compile(
    r"^\s*(?:\([^)\s]*\)\s*)?"
    r"(?P<who>\[[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*)?|[\w.-]+:\S*)?"
    r"\s*(?P<sigil>[$#%>\u276f])(?:\s+(?P<command>\S.*))?\s*$"
)
_COMPANIONS = re.compile(r"^(?:sudo\s+|doas\s+)?(?:lscpu|cat|nproc|numactl|uname|hwtune)\b")
_SIZE = re.compile(
    r"^(\d{1,18}(?:\.\d{1,18})?)\s*([KMGT]?)(i?B)?\s*(?:\((\d{1,18}) instances?\))?$",
    re.ASCII,
)
MAX_DIGITS = 18  # no count or id lscpu prints comes near; int() refuses over 4300 digits
_E_COLUMNS = {
    "CPU", "BOOK", "DRAWER", "NODE", "SOCKET", "CLUSTER", "CORE", "L1d:L1i:L2:L3", "L1d:L1i:L2",
    "POLARIZATION", "ADDRESS", "CONFIGURED", "ONLINE", "MHZ", "SCALMHZ%", "MAXMHZ", "MINMHZ",
    "MODELNAME",
}  # fmt: skip


def _command(line: str) -> str | None:
    """The command after a shell prompt ("" for a bare prompt); None when `line` is no prompt."""
    match = _PROMPT.match(line)
    if match is None:
        return None
    command = (match.group("command") or "").strip()
    strong = match.group("who") is not None or match.group("sigil") != "#"
    if strong or _COMPANIONS.match(command):
        return command
    return None


def strip_transcript(lines: list[str]) -> list[str]:
    """`lines` with prompts and other commands' output blanked; unchanged without prompts."""
    commands = [(index, _command(line)) for index, line in enumerate(lines)]
    if all(command is None for _, command in commands):
        return lines
    kept = list(lines)
    keep = True  # text before the first prompt is taken as lscpu's
    for index, command in commands:
        if command is not None:
            keep = "lscpu" in command
            kept[index] = ""
        elif not keep:
            kept[index] = ""
    return kept


def extended_header(line: str) -> list[str] | None:
    """The lower-cased column names of an `lscpu -e` header line, else None."""
    names = line.split()
    if len(names) < 2 or names[0] != "CPU" or not set(names) <= _E_COLUMNS:
        return None
    return [name.lower() for name in names]


def extended_cells(line: str, columns: list[str]) -> list[str] | None:
    """One `lscpu -e` row split into its columns; None when it does not fit them."""
    cells = line.split()
    if len(cells) > len(columns) and columns[-1] == "modelname":
        # Model names hold spaces ("Intel(R) Xeon(R) ..."): the last column takes the rest.
        last = len(columns) - 1
        cells = [*cells[:last], " ".join(cells[last:])]
    return cells if len(cells) == len(columns) else None


class LscpuCache(NamedTuple):
    name: str  # "L1d", "L2"…
    size_bytes: int | None  # per instance, when it can be told
    instances: int | None


def caches_from_fields(fields: dict[str, str]) -> tuple[LscpuCache, ...]:
    caches = []
    for name in ("L1d", "L1i", "L2", "L3", "L4"):
        # "L1d cache: 32K" (classic layout) or "L1d: 4 MiB (64 instances)" under "Caches".
        value = fields.get(f"{name} cache", fields.get(name))
        if value is None:
            continue
        match = _SIZE.match(value.strip())
        if match is None:
            continue
        number, unit, suffix, count = match.groups()
        scale = 1024 ** "_KMGT".index(unit) if unit else 1
        total = int(float(number) * scale)
        if not within_u64(total):
            continue
        instances = int(count) if count else None
        if instances:
            # "544 KiB (14 instances)" is a sum; only an even split is a per-instance size.
            per = total // instances if total % instances == 0 else None
        elif suffix:
            per = None  # "4.1 MiB" with no count: a rounded sum of unknown instances
        else:
            per = total  # util-linux < 2.34 printed one instance: "32K"
        caches.append(LscpuCache(name=name, size_bytes=per, instances=instances))
    return tuple(caches)


class LscpuRow(NamedTuple):
    """One `lscpu -p` or `-e` row; None where the column is absent, empty or "-" (offline)."""

    cpu: int
    core: int | None = None
    socket: int | None = None
    node: int | None = None
    max_mhz: float | None = None
    online: bool | None = None
    l1d: int | None = None  # the L1d cache id
    llc: int | None = None  # the id of the last cache column (L3, else L2)
    l1i: int | None = None  # the L1i cache id: the threads of one core share theirs

    def core_key(self) -> tuple[int | None, int | None, int | None]:
        """What tells this CPU's core apart. lscpu's logical Core ids restart for each core
        type (util-linux's A510/A710/A715/X3 dump repeats Core 0 on CPUs 0, 3, 5, 7); CPUs with
        their own L1i (the front end SMT threads share) are never threads of one core, so the
        L1i id is part of the key. Not the L1d: an AMD Bulldozer module's two integer cores
        each have their own L1d but share the L1i, FPU and L2, and the kernel counts them as
        one core's two threads (util-linux's lscpu-vmware_fpe, an Opteron 6328: "Thread(s) per
        core: 2", Core 0 on CPUs 0 and 1 with L1d ids 0 and 1, L1i id 0). Sections without an
        L1i column fall back to the L1d."""
        return (self.socket, self.core, self.l1i if self.l1i is not None else self.l1d)


class LscpuFacts(NamedTuple):
    fields: dict[str, str]  # summary key (no colon) -> value
    flags: tuple[str, ...]
    numa: dict[int, tuple[int, ...]]
    rows: tuple[LscpuRow, ...]  # from the first -p section with CPU and Core columns
    max_mhz: dict[int, float]  # from any -p section with MAXMHZ
    caches: tuple[LscpuCache, ...]
    problems: tuple[ParseProblem, ...]
    # One dict per "Model name" block: lscpu prints one per core type (Arm big.LITTLE).
    types: tuple[dict[str, str], ...] = ()
    sections: tuple[tuple[LscpuRow, ...], ...] = ()  # every -p/-e section with a Core column

    def number(self, key: str) -> int | None:
        """An integer summary value; None when absent or not a number ("-")."""
        value = self.fields.get(key, "").strip()
        return int(value) if is_ascii_digits(value) and len(value) <= MAX_DIGITS else None
