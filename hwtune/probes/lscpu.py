"""Saved `lscpu` output (`DIR/lscpu.txt`): the summary, `lscpu -p` sections, `lscpu -e` tables.

Handles what util-linux prints and what people save:
- the classic flat summary and the tree layout of util-linux >= 2.37 (indented child keys);
- values hard-wrapped at a fixed column (libsmartcols, util-linux >= 2.38 on a terminal): a
  continuation line is indented at least to the column where the value starts, and exactly that
  indent is removed before joining, so a flag split mid-token ("l" + "ahf_lm") comes back whole;
  lines a terminal wrapped at its width (continuations at column 0) are joined the same way;
- several "Model name" blocks, one per core type (Arm big.LITTLE/DynamIQ), kept apart in `types`;
- `lscpu -p` sections ("# CPU,Core,Socket,Node,,L1d,L1i,L2,L3" then rows), several of them
  concatenated, rows with missing columns ("16,10,0,0,,1,0"), and `lscpu -e` tables;
- `lscpu -J` JSON, and shell transcripts holding any of these (probes/lscpu_forms.py).
Parsing is pure (`parse_lscpu`); problems carry their line numbers.
"""

from __future__ import annotations

import math
import re

from hwtune.models.cpulist import MAX_CPU, MAX_NUMA_NODES, CpuListError, parse_cpulist
from hwtune.models.digits import is_ascii_digits
from hwtune.probes.clusters import merge_clusters
from hwtune.probes.cpuinfo import PROBE, Cap, ParseProblem, ProblemList, Topology, overlong
from hwtune.probes.issues import IssueLog
from hwtune.probes.json_text import JsonRefused, loads_bounded
from hwtune.probes.lscpu_counts import rows_cache_spans, s390_sockets, typed_topology
from hwtune.probes.lscpu_forms import (
    MAX_DIGITS,
    LscpuFacts,
    LscpuRow,
    caches_from_fields,
    extended_cells,
    extended_header,
    strip_transcript,
)

__all__ = ["LscpuFacts", "LscpuRow", "lscpu_topology", "parse_lscpu"]

_KEY = re.compile(r"^(\s*)([^:]+?):(\s*)(.*)$")
# Digit counts are bounded: int() refuses strings over 4300 digits with a bare ValueError, and
# no real count, size or node number comes near 18 digits. re.ASCII: a str pattern's \d also
# matches Arabic-Indic and other Unicode digits, which lscpu never prints
# (hwtune/models/digits.py).
_NUMA_KEY = re.compile(r"^NUMA node(\d{1,9}) CPU\(s\)$", re.ASCII)
# `lscpu -J` nests a field's children one list and one object deeper per level of the tree
# layout (util-linux >= 2.37 prints three levels: "Caches (sum of all):" > "L1d:"); 32 is far
# beyond it and far below the ~1000 where json's scanner runs out of stack.
MAX_JSON_NESTING = 32


def parse_lscpu(text: str) -> LscpuFacts:
    """Parse saved `lscpu` output: summary, `-p` sections, `-e` tables, `-J`, or a transcript."""
    lines = strip_transcript(text.split("\n"))
    body = "\n".join(lines)
    if body.lstrip().startswith("{"):
        return _parse_json(body)
    problems: list[ParseProblem] = ProblemList()
    summary = _Summary(lines, problems)
    sections: list[tuple[list[str], list[tuple[int, list[str]]]]] = []
    mode = ""  # "p" inside a `-p` section, "e" inside an `-e` table, "" in the summary
    rows = _RowBudget(problems)
    for index, raw in enumerate(lines):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped:
            summary.last_key = None
            continue
        if "\x00" in line or "\ufffd" in line:
            problems.append(ParseProblem(index + 1, "binary data, not text"))
            summary.last_key = None
            continue
        if stripped.startswith("#"):
            names = [c.strip().lower() for c in stripped.lstrip("#").split(",")]
            if len(names) > 1 and names[0] == "cpu":
                mode = "p"
                sections.append((names, []))
            continue
        header = extended_header(stripped)
        if header is not None:
            mode = "e"
            sections.append((header, []))
            continue
        if mode == "e" and is_ascii_digits(stripped[0]):
            cells = extended_cells(stripped, sections[-1][0])
            if cells is None:
                problems.append(
                    ParseProblem(index + 1, f"not an 'lscpu -e' row: {stripped[:60]!r}")
                )
            elif rows.take(index + 1):
                sections[-1][1].append((index + 1, cells))
            continue
        if mode == "p" and sections and is_ascii_digits(stripped[0]):
            if rows.take(index + 1):
                sections[-1][1].append((index + 1, stripped.split(",")))
            continue
        if mode == "p" and not _KEY.match(line):
            problems.append(ParseProblem(index + 1, f"not an 'lscpu -p' row: {stripped[:60]!r}"))
            continue
        mode = ""
        summary.add(index, line, problems)
    return _facts(summary.fields, summary.key_lines, sections, problems, summary.types)


# Keys of the summary kept: lscpu prints about 40, one per NUMA node (at most MAX_NUMA_NODES,
# 1024) and one per CPU vulnerability (about 20). 2.7 million different keys in a 31 MB file
# took detect 14 s and 1.1 GB.
MAX_KEYS = 4096


class _RowBudget:
    """Counts `-p`/`-e` rows over every section: past MAX_CPU of them (the CPU-list bound, far
    beyond the 8192 CPUs of x86-64's MAXSMP) the rest are dropped with one problem, so a 32 MiB
    file of rows costs a bounded parse."""

    def __init__(self, problems: list[ParseProblem]) -> None:
        self.count = 0
        self.cap = Cap(problems, MAX_CPU, f"more than {MAX_CPU} CPU rows: the rest are ignored")

    def take(self, line: int) -> bool:
        self.count += 1
        return not self.cap.over(self.count - 1, line)


class _Summary:
    """The "Key: value" lines, their line numbers, and one dict per "Model name" block."""

    def __init__(self, lines: list[str], problems: list[ParseProblem]) -> None:
        # Each value as its parts, joined once at the end: appending each wrapped line to a
        # str copied the value so far, quadratic in its lines (11 MB of them ran over a minute).
        # A key's list is shared by `_fields` and its "Model name" block in `_types`.
        self._fields: dict[str, list[str]] = {}
        self.key_lines: dict[str, int] = {}
        self._types: list[dict[str, list[str]]] = []
        self.keys = Cap(
            problems, MAX_KEYS, f"more than {MAX_KEYS} different keys: the rest are ignored"
        )
        self.last_key: str | None = None
        self.value_column = 0
        self.lines = lines
        # A terminal that wrapped long lines left them all this wide (see add()).
        self.width = max((len(line.rstrip()) for line in lines), default=0)

    def add(self, index: int, line: str, problems: list[ParseProblem]) -> None:
        indent = len(line) - len(line.lstrip(" "))
        key = self.last_key
        if key is not None and self.value_column and indent >= self.value_column:
            # libsmartcols wrapped the value at its column, mid-token: remove exactly that indent.
            self._extend(key, line[self.value_column :])
            return
        match = _KEY.match(line)
        if match is None:
            previous = self.lines[index - 1].rstrip() if index else ""
            if key is not None and len(previous) >= 60:
                # A terminal wrapped the line at its width, continuing at column 0.
                # A full line was cut mid-token: join exactly (a leading space is content).
                full = len(previous) == self.width
                self._extend(key, line.rstrip() if full else " " + line.strip())
                return
            got = line.strip()[:60]
            problems.append(ParseProblem(index + 1, f"expected 'Key: value', got {got!r}"))
            self.last_key = None
            return
        key = match.group(2).strip()
        if key not in self._fields and self.keys.over(len(self._fields), index + 1):
            self.last_key = None
            return
        value = match.group(4).rstrip()
        if value == "-":
            # lscpu's mark for a value it does not know (util-linux sys-utils/lscpu.c prints
            # `ct->modelname ? ct->modelname : "-"`): no value, not a model named "-".
            value = ""
        parts = [value]
        if key == "Model name":
            self._types.append({})
        if self._types:
            self._types[-1][key] = parts
        self._fields[key] = parts
        self.key_lines[key] = index + 1
        self.last_key = key
        # Where the value starts; an empty value (a tree section header) has no column.
        self.value_column = match.start(4) if match.group(4) else 0

    def _extend(self, key: str, text: str) -> None:
        self._fields[key].append(text)  # the same list as its block's in `_types`

    @property
    def fields(self) -> dict[str, str]:
        return {key: "".join(parts) for key, parts in self._fields.items()}

    @property
    def types(self) -> list[dict[str, str]]:
        return [{key: "".join(parts) for key, parts in block.items()} for block in self._types]


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
    l1d, l1i, caches = at("l1d"), at("l1i"), max(at("l1d:l1i:l2:l3"), at("l1d:l1i:l2"))
    llc = max(at("l3"), at("l2"))  # the L3 column follows the L2 one
    rows = []
    for number, cells in raw_rows:
        cpu = _cell_int(cells, 0)
        if cpu is None:
            problems.append(ParseProblem(number, f"CPU column is not a number: {cells[0][:20]!r}"))
            continue
        if cpu >= MAX_CPU:
            problems.append(
                ParseProblem(number, f"CPU {cpu} is beyond {MAX_CPU - 1}: row ignored")
            )
            continue
        mhz = None
        if 0 <= maxmhz < len(cells) and cells[maxmhz].strip() not in ("", "-"):
            mhz = _mhz(cells[maxmhz], number, problems)
        state = cells[online].strip().upper() if 0 <= online < len(cells) else ""
        node_id = _cell_int(cells, node)
        if node_id is not None and node_id >= MAX_NUMA_NODES:
            problems.append(
                ParseProblem(
                    number, f"NUMA node {node_id} is beyond {MAX_NUMA_NODES - 1}: node unknown"
                )
            )
            node_id = None
        rows.append(
            LscpuRow(
                cpu=cpu,
                core=_cell_int(cells, core),
                socket=_cell_int(cells, socket),
                node=node_id,
                max_mhz=mhz,
                online={"Y": True, "YES": True, "N": False, "NO": False}.get(state),
                l1d=_cell_int(cells, l1d) if l1d >= 0 else _cache_id(cells, caches, 0),
                llc=_cell_int(cells, llc) if llc >= 0 else _cache_id(cells, caches, -1),
                l1i=_cell_int(cells, l1i) if l1i >= 0 else _cache_id(cells, caches, 1),
            )
        )
    return rows


def _mhz(cell: str, line: int, problems: list[ParseProblem]) -> float | None:
    """A MAXMHZ cell ("4800.0000"); None, with a problem, unless a positive finite number.
    float() also takes "inf", "nan" and "1e400" (= inf): they would reach `detect --json` as
    Infinity/NaN, which is not JSON, and a NaN ranks below every clock in the core-type split."""
    try:
        mhz = float(cell)
    except ValueError:
        problems.append(ParseProblem(line, f"MAXMHZ is not a number: {cell[:20]!r}"))
        return None
    if not math.isfinite(mhz) or mhz <= 0:
        problems.append(
            ParseProblem(line, f"MAXMHZ {cell.strip()[:20]!r} is not a positive clock: unknown")
        )
        return None
    return mhz


def _cache_id(cells: list[str], column: int, which: int) -> int | None:
    """One id of an `lscpu -e` cache cell ("12:12:6:0"): 0 the L1d, 1 the L1i, -1 the last
    level; None when the cell has no such id (":::" of an offline CPU is four empty ids)."""
    if column < 0 or column >= len(cells):
        return None
    ids = cells[column].split(":")
    return _cell_int([ids[which]], 0) if -len(ids) <= which < len(ids) else None


def _facts(
    fields: dict[str, str],
    key_lines: dict[str, int],
    sections: list[tuple[list[str], list[tuple[int, list[str]]]]],
    problems: list[ParseProblem],
    types: list[dict[str, str]] | None = None,
) -> LscpuFacts:
    for key, value in list(fields.items()):  # a value wrapped over many lines, or -J's "data"
        if why := overlong(key, value):
            problems.append(ParseProblem(key_lines.get(key, 1), why))
            del fields[key]
    types = [{k: v for k, v in block.items() if not overlong(k, v)} for block in types or ()]
    topology: list[tuple[LscpuRow, ...]] = []
    max_mhz: dict[int, float] = {}
    for columns, raw_rows in sections:
        rows = _rows(columns, raw_rows, problems)
        if "core" in columns and rows:
            topology.append(tuple(rows))
        max_mhz.update({r.cpu: r.max_mhz for r in rows if r.max_mhz is not None})
    numa: dict[int, tuple[int, ...]] = {}
    for key, value in fields.items():
        match = _NUMA_KEY.match(key)
        if match and int(match.group(1)) >= MAX_NUMA_NODES:
            problems.append(
                ParseProblem(
                    key_lines.get(key, 1),
                    f"{key}: node {match.group(1)} is beyond {MAX_NUMA_NODES - 1}: ignored",
                )
            )
        elif match:
            try:
                numa[int(match.group(1))] = parse_cpulist(value)
            except CpuListError as err:
                problems.append(ParseProblem(key_lines.get(key, 1), f"{key}: {err}"))
    return LscpuFacts(
        fields=fields,
        flags=tuple(sorted(set(fields.get("Flags", "").split()))),
        numa=numa,
        rows=topology[0] if topology else (),
        max_mhz=max_mhz,
        caches=caches_from_fields(fields),
        problems=tuple(problems),
        types=tuple(types or ()) if len(types or ()) > 1 else (),
        sections=tuple(topology),
    )


def _parse_json(text: str) -> LscpuFacts:
    try:
        data = loads_bounded(text, MAX_JSON_NESTING)
    except JsonRefused as err:
        return _facts({}, {}, [], [ParseProblem(err.line or 1, err.reason)])
    fields: dict[str, str] = {}
    types: list[dict[str, str]] = []  # one per "Model name", as in the text form

    def walk(items: object) -> None:
        if not isinstance(items, list):
            return
        for item in items:
            if isinstance(item, dict) and isinstance(item.get("field"), str):
                key, value = item["field"].strip().rstrip(":"), str(item.get("data") or "")
                if key == "Model name":
                    types.append({})
                if types:
                    types[-1][key] = value
                fields[key] = value
                walk(item.get("children"))

    walk(data.get("lscpu") if isinstance(data, dict) else None)
    if not fields:
        return _facts({}, {}, [], [ParseProblem(1, "no 'lscpu' list of fields in the JSON")])
    return _facts(fields, {}, [], [], types)


def lscpu_topology(lscpu: LscpuFacts, issues: IssueLog, *, soc: bool = False) -> Topology | None:
    """Topology from `lscpu -p`/`-e` rows when they cover every online CPU, else the summary;
    `soc` (arm64, riscv64): socket ids that are clusters are joined (probes/clusters.py).

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
    if lscpu.types:
        return typed_topology(lscpu, topo, issues)
    online_set = set(topo.online)  # `in` on the tuple made 40,000 rows take seconds
    if rows and {r.cpu for r in rows} >= online_set:
        topo.basis = "lscpu rows (-p/-e): sockets from the Socket column"
        topo.count({r.cpu: (r.socket, r.core_key()) for r in rows if r.cpu in online_set})
        said = lscpu.number("Thread(s) per core")
        if said and topo.threads_per_core and said != topo.threads_per_core:
            # util-linux's lscpu-rv64-linux (a SiFive U74-MC, no SMT) prints 2 and puts CPUs 0
            # and 1 in Core 0, though each has its own L1d and L1i: not one core's threads.
            issues.add(
                PROBE,
                f"the summary says {said} thread(s) per core, but the -p/-e rows give "
                f"{topo.threads_per_core} (CPUs with their own L1i cache are separate cores): "
                "the rows are used",
                path="lscpu.txt",
            )
        if soc:  # an older lscpu on a pre-6.3 SoC kernel prints each cluster as a socket
            places, note = merge_clusters(topo.places, rows_cache_spans(lscpu), lscpu.max_mhz)
            if note:
                topo.count(places)
                topo.basis += f"; {note}"
        return topo
    topo.basis = "lscpu summary: Socket(s) x Core(s) per socket"
    threads = lscpu.number("Thread(s) per core")
    per_socket = lscpu.number("Core(s) per socket") or lscpu.number("Core(s) per cluster")
    # util-linux < 2.19 printed "CPU socket(s)" (its ia64-pg0 expected output).
    sockets = lscpu.number("Socket(s)") or lscpu.number("CPU socket(s)") or s390_sockets(lscpu)
    units = sockets or lscpu.number("Cluster(s)")
    topo.sockets = sockets
    topo.cores = per_socket * units if per_socket and units else None
    if topo.logical and (topo.cores or 0) > topo.logical:
        # s390 and some hypervisors print a virtual layout larger than the machine.
        issues.add(
            PROBE,
            f"{sockets or units} socket(s) of {per_socket} cores exceed the {topo.logical} CPUs: "
            "sockets and cores unknown",
            path="lscpu.txt",
        )
        topo.sockets = topo.cores = None
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
