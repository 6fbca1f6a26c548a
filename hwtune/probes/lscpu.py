"""Saved `lscpu` output (`DIR/lscpu.txt`): the summary, and any `lscpu -p` sections after it.

Handles what util-linux prints and what people save:
- the classic flat summary and the tree layout of util-linux >= 2.37 (indented child keys);
- values hard-wrapped at a fixed column (a pasted terminal capture): a continuation line is
  indented at least to the column where the value starts, and exactly that indent is removed
  before joining, so a flag split mid-token ("l" + "ahf_lm") comes back whole;
- `lscpu -p` sections ("# CPU,Core,Socket,Node,,L1d,L1i,L2,L3" then rows), several of them
  concatenated, rows with missing columns ("16,10,0,0,,1,0");
- `lscpu -J` JSON.
Parsing is pure (`parse_lscpu`); problems carry their line numbers.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from hwtune.models.cpulist import MAX_CPU, CpuListError, parse_cpulist
from hwtune.models.digits import is_ascii_digits
from hwtune.probes.cpuinfo import PROBE, ParseProblem, Topology
from hwtune.probes.issues import IssueLog

_KEY = re.compile(r"^(\s*)([^:]+?):(\s*)(.*)$")
# Digit counts are bounded: int() refuses strings over 4300 digits with a bare ValueError, and
# no real count, size or node number comes near 18 digits. re.ASCII: a str pattern's \d also
# matches Arabic-Indic and other Unicode digits, which lscpu never prints
# (hwtune/models/digits.py).
_NUMA_KEY = re.compile(r"^NUMA node(\d{1,9}) CPU\(s\)$", re.ASCII)
_SIZE = re.compile(
    r"^(\d{1,18}(?:\.\d{1,18})?)\s*([KMGT]?)(i?B)?\s*(?:\((\d{1,18}) instances?\))?$",
    re.ASCII,
)
MAX_DIGITS = 18


class LscpuRow(NamedTuple):
    """One `lscpu -p` row; None where the column is absent or empty (offline CPUs)."""

    cpu: int
    core: int | None = None
    socket: int | None = None
    node: int | None = None
    max_mhz: float | None = None
    online: bool | None = None


class LscpuCache(NamedTuple):
    name: str  # "L1d", "L2"…
    size_bytes: int | None  # per instance, when it can be told
    instances: int | None


class LscpuFacts(NamedTuple):
    fields: dict[str, str]  # summary key (no colon) -> value
    flags: tuple[str, ...]
    numa: dict[int, tuple[int, ...]]
    rows: tuple[LscpuRow, ...]  # from the first -p section with CPU and Core columns
    max_mhz: dict[int, float]  # from any -p section with MAXMHZ
    caches: tuple[LscpuCache, ...]
    problems: tuple[ParseProblem, ...]

    def number(self, key: str) -> int | None:
        """An integer summary value; None when absent or not a number ("-")."""
        value = self.fields.get(key, "").strip()
        return int(value) if is_ascii_digits(value) and len(value) <= MAX_DIGITS else None


def parse_lscpu(text: str) -> LscpuFacts:
    """Parse saved `lscpu` output (text, with optional `-p` sections, or `lscpu -J`)."""
    if text.lstrip().startswith("{"):
        return _parse_json(text)
    lines = text.split("\n")
    problems: list[ParseProblem] = []
    fields, key_lines, first_parsable = _summary(lines, problems)
    sections = _parsable_sections(lines, first_parsable, problems)
    return _facts(fields, key_lines, sections, problems)


def _summary(
    lines: list[str], problems: list[ParseProblem]
) -> tuple[dict[str, str], dict[str, int], int]:
    fields: dict[str, str] = {}
    key_lines: dict[str, int] = {}
    last_key: str | None = None
    value_column = 0
    for index, raw in enumerate(lines):
        line = raw.rstrip("\r")
        if line.startswith("#"):
            return fields, key_lines, index
        if not line.strip():
            last_key = None
            continue
        if "\x00" in line or "\ufffd" in line:
            problems.append(ParseProblem(index + 1, "binary data, not text"))
            last_key = None
            continue
        indent = len(line) - len(line.lstrip(" "))
        if last_key is not None and value_column and indent >= value_column:
            fields[last_key] += line[value_column:]
            continue
        match = _KEY.match(line)
        if match is None:
            got = line.strip()[:60]
            problems.append(ParseProblem(index + 1, f"expected 'Key: value', got {got!r}"))
            last_key = None
            continue
        key = match.group(2).strip()
        fields[key] = match.group(4).rstrip()
        key_lines[key] = index + 1
        last_key = key
        # Where the value starts; an empty value (a tree section header) has no column.
        value_column = match.start(4) if match.group(4) else 0
    return fields, key_lines, len(lines)


def _parsable_sections(
    lines: list[str], start: int, problems: list[ParseProblem]
) -> list[tuple[list[str], list[tuple[int, list[str]]]]]:
    """[(column names, [(line number, cells)])] for each `lscpu -p` section."""
    sections: list[tuple[list[str], list[tuple[int, list[str]]]]] = []
    columns: list[str] | None = None
    for index in range(start, len(lines)):
        line = lines[index].strip()
        if not line:
            continue
        if line.startswith("#"):
            names = [c.strip().lower() for c in line.lstrip("#").split(",")]
            if len(names) > 1 and names[0] == "cpu":
                columns = names
                sections.append((columns, []))
            continue
        if columns is None or not is_ascii_digits(line[0]):
            problems.append(ParseProblem(index + 1, f"not an 'lscpu -p' row: {line[:60]!r}"))
            continue
        sections[-1][1].append((index + 1, line.split(",")))
    return sections


def _cell_int(cells: list[str], column: int) -> int | None:
    if column < 0 or column >= len(cells):
        return None
    value = cells[column].strip()
    return int(value) if is_ascii_digits(value) and len(value) <= MAX_DIGITS else None


def _rows(
    columns: list[str], raw_rows: list[tuple[int, list[str]]], problems: list[ParseProblem]
) -> list[LscpuRow]:
    def at(name: str) -> int:
        return columns.index(name) if name in columns else -1

    core, socket, node = at("core"), at("socket"), at("node")
    maxmhz, online = at("maxmhz"), at("online")
    rows = []
    for number, cells in raw_rows:
        cpu = _cell_int(cells, 0)
        if cpu is None:
            problems.append(ParseProblem(number, f"CPU column is not a number: {cells[0][:20]!r}"))
            continue
        mhz = None
        if 0 <= maxmhz < len(cells) and cells[maxmhz].strip():
            try:
                mhz = float(cells[maxmhz])
            except ValueError:
                bad = cells[maxmhz][:20]
                problems.append(ParseProblem(number, f"MAXMHZ is not a number: {bad!r}"))
        state = cells[online].strip().upper() if 0 <= online < len(cells) else ""
        rows.append(
            LscpuRow(
                cpu=cpu,
                core=_cell_int(cells, core),
                socket=_cell_int(cells, socket),
                node=_cell_int(cells, node),
                max_mhz=mhz,
                online={"Y": True, "N": False}.get(state),
            )
        )
    return rows


def _facts(
    fields: dict[str, str],
    key_lines: dict[str, int],
    sections: list[tuple[list[str], list[tuple[int, list[str]]]]],
    problems: list[ParseProblem],
) -> LscpuFacts:
    topology: list[LscpuRow] = []
    max_mhz: dict[int, float] = {}
    for columns, raw_rows in sections:
        rows = _rows(columns, raw_rows, problems)
        if not topology and "core" in columns and rows:
            topology = rows
        max_mhz.update({r.cpu: r.max_mhz for r in rows if r.max_mhz is not None})
    numa: dict[int, tuple[int, ...]] = {}
    for key, value in fields.items():
        match = _NUMA_KEY.match(key)
        if match:
            try:
                numa[int(match.group(1))] = parse_cpulist(value)
            except CpuListError as err:
                problems.append(ParseProblem(key_lines.get(key, 1), f"{key}: {err}"))
    return LscpuFacts(
        fields=fields,
        flags=tuple(sorted(set(fields.get("Flags", "").split()))),
        numa=numa,
        rows=tuple(topology),
        max_mhz=max_mhz,
        caches=_caches(fields),
        problems=tuple(problems),
    )


def _caches(fields: dict[str, str]) -> tuple[LscpuCache, ...]:
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


def _parse_json(text: str) -> LscpuFacts:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        return _facts({}, {}, [], [ParseProblem(err.lineno, f"invalid JSON: {err.msg}")])
    fields: dict[str, str] = {}

    def walk(items: object) -> None:
        if not isinstance(items, list):
            return
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("field"), str):
                fields[item["field"].strip().rstrip(":")] = str(item.get("data") or "")
                walk(item.get("children"))

    walk(data.get("lscpu") if isinstance(data, dict) else None)
    if not fields:
        return _facts({}, {}, [], [ParseProblem(1, "no 'lscpu' list of fields in the JSON")])
    return _facts(fields, {}, [], [])


def lscpu_topology(lscpu: LscpuFacts, issues: IssueLog) -> Topology | None:
    """Topology from `lscpu -p` rows when they cover every online CPU, else from the summary.

    The summary's Socket(s) x Core(s) per socket is the core count lscpu itself computed; its
    Thread(s) per core is kept only when it multiplies out to the online CPUs (on hybrid parts it
    does not: 6 two-thread P-cores + 10 E-cores print "2" for 22 CPUs on 16 cores).
    """
    logical = lscpu.number("CPU(s)")
    if logical is not None and logical > MAX_CPU:
        # Beyond the CPU-list bound: no machine has it, and range() over it would exhaust memory.
        issues.add(PROBE, f"CPU(s): {logical} is beyond {MAX_CPU} CPUs: ignored", path="lscpu.txt")
        logical = None
    online: tuple[int, ...] = ()
    if "On-line CPU(s) list" in lscpu.fields:
        try:
            online = parse_cpulist(lscpu.fields["On-line CPU(s) list"])
        except CpuListError as err:
            issues.add(PROBE, f"On-line CPU(s) list: {err}", path="lscpu.txt")
    rows = [r for r in lscpu.rows if r.core is not None and r.online is not False]
    if not online and rows:
        online = tuple(sorted(r.cpu for r in rows))
    if logical is None and not online:
        issues.add(PROBE, "no CPU(s) line and no on-line list: counts unknown", path="lscpu.txt")
        return None
    topo = Topology(logical or len(online), online or tuple(range(logical or 0)))
    if rows and {r.cpu for r in rows} >= set(topo.online):
        topo.basis = "lscpu -p"
        return topo.count(
            {r.cpu: (r.socket, (r.socket, r.core)) for r in rows if r.cpu in topo.online}
        )
    topo.basis = "lscpu summary"
    threads = lscpu.number("Thread(s) per core")
    per_socket = lscpu.number("Core(s) per socket") or lscpu.number("Core(s) per cluster")
    sockets = lscpu.number("Socket(s)")
    units = sockets or lscpu.number("Cluster(s)")
    topo.sockets = sockets
    topo.cores = per_socket * units if per_socket and units else None
    topo.smt = threads > 1 if threads else None
    if threads and topo.cores and threads * topo.cores == len(topo.online):
        topo.threads_per_core = threads
    elif threads:
        issues.add(
            PROBE,
            f"{threads} thread(s) per core but {len(topo.online)} online CPUs on "
            f"{topo.cores} cores: threads per core are not uniform",
            path="lscpu.txt",
        )
    return topo
